"""The documented 1.x command form (DECISIONS 2): `msprobe -f {pytorch,mindspore} compare -i compare.json ...`,
`msprobe -f {pytorch,mindspore} run_ut -api_info dump.json ...` (acc_check), `... multi_run_ut ...`
(multi_acc_check), translated into today's options so that both forms drive the same engine."""

from __future__ import annotations

import os

from msprobe.errors import UsageError

FRAMEWORKS = ("pytorch", "mindspore")


def translate(argv: list) -> list:
    """New-form argv for a 1.x-form argv; any other argv is returned unchanged."""
    if not argv or argv[0] not in ("-f", "--framework"):
        return argv
    if len(argv) < 2 or argv[1] not in FRAMEWORKS:
        raise UsageError(f"-f/--framework must be one of {', '.join(FRAMEWORKS)} (1.x form: "
                         "msprobe -f mindspore compare -i compare.json -o out).")
    rest = argv[2:]
    if rest and rest[0] in ("run_ut", "multi_run_ut"):
        # the options of (multi_)acc_check are those of (multi_)run_ut (the same names; -f after the command is
        # -f/--filter_api); the framework named by the first -f must be the dump's
        command = "acc_check" if rest[0] == "run_ut" else "multi_acc_check"
        return [command, *rest[1:], "--expected_framework", argv[1]]
    if rest and rest[0] in ("graph", "graph_visualize"):
        return ["graph"] + _translate_options(rest[1:], _graph_from_compare_json)
    if not rest or rest[0] != "compare":
        return rest
    return ["compare"] + _translate_options(rest[1:], _from_compare_json)


def command_of(argv: list) -> str:
    """` <command>` of a 1.x-form argv (for its error line), else ""."""
    if len(argv) > 2 and argv[0] in ("-f", "--framework") and not argv[2].startswith("-"):
        return f" {argv[2]}"
    return ""


def _translate_options(args: list, from_compare_json) -> list:
    """The options after a 1.x command: `-i compare.json` becomes today's path options, and `-f` (after the
    command it means fuzzy match) becomes -fm; the rest passes through."""
    out = []
    paths: list = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-i", "--input_path"):
            if index + 1 >= len(args):
                raise UsageError("-i needs the path of compare.json.")
            paths = from_compare_json(args[index + 1])
            index += 2
            continue
        out.append("-fm" if arg in ("-f", "--fuzzy_match") else arg)
        index += 1
    return paths + out


def _graph_from_compare_json(path: str) -> list:
    config = _load_compare_json(path)
    if "npu_path" not in config:
        raise UsageError(f"{path} must be an object with npu_path (and optional bench_path).")
    args = ["-tp", str(config["npu_path"])]
    if config.get("bench_path"):
        args += ["-gp", str(config["bench_path"])]
    if config.get("is_print_compare_log", True) is True:
        args.append("-tensor_log")
    return args


def _load_compare_json(path: str):
    from msprobe.dump.reader import load_json_object

    return load_json_object(path, "compare.json", UsageError)[1]


def _from_compare_json(path: str) -> list:
    config = _load_compare_json(path)
    if "npu_path" not in config or "bench_path" not in config:
        raise UsageError(f"{path} must be an object with npu_path and bench_path.")
    args = ["-tp", str(config["npu_path"]), "-gp", str(config["bench_path"])]
    if config.get("is_print_compare_log", True) is True and not os.path.isdir(str(config["npu_path"])):
        args.append("-tensor_log")
    if config.get("stack_path"):
        args += ["--stack_path", str(config["stack_path"])]
    if "rank_id" in config or "step_id" in config:
        for key, option in (("rank_id", "--rank"), ("step_id", "--step")):
            values = config.get(key) or []
            if not isinstance(values, list) or any(not isinstance(v, int) for v in values):
                raise UsageError(f"{path}: {key} must be a list of integers.")
            args += [option, ",".join(str(v) for v in values)] if values else [option]
    return args
