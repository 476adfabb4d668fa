"""The documented 1.x command form (DECISIONS 2): `msprobe -f {pytorch,mindspore} compare -i compare.json ...`,
translated into today's options so that both forms drive the same engine."""

from __future__ import annotations

import json
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
    if rest and rest[0] in ("graph", "graph_visualize"):
        return ["graph"] + _translate_graph(rest[1:])
    if not rest or rest[0] != "compare":
        return rest
    return ["compare"] + _translate_compare(rest[1:])


def _translate_graph(args: list) -> list:
    """1.x graph: -i compare.json (npu_path, optional bench_path, is_print_compare_log), -f = fuzzy match."""
    out = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-i", "--input_path"):
            if index + 1 >= len(args):
                raise UsageError("-i needs the path of compare.json.")
            out = _graph_from_compare_json(args[index + 1]) + out
            index += 2
            continue
        out.append("-fm" if arg in ("-f", "--fuzzy_match") else arg)
        index += 1
    return out


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
    from msprobe.dump.paths import check_input_file

    path = check_input_file(path, "compare.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}).") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path} must be a JSON object.")
    return config


def _translate_compare(args: list) -> list:
    out = []
    compare_json = None
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-i", "--input_path"):
            if index + 1 >= len(args):
                raise UsageError("-i needs the path of compare.json.")
            compare_json = args[index + 1]
            index += 2
            continue
        if arg in ("-f", "--fuzzy_match"):      # after `compare`, -f is fuzzy match in the 1.x form
            out.append("-fm")
        else:
            out.append(arg)
        index += 1
    if compare_json is None:
        return out
    return _from_compare_json(compare_json) + out


def _from_compare_json(path: str) -> list:
    from msprobe.dump.paths import check_input_file

    path = check_input_file(path, "compare.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}).") from None
    if not isinstance(config, dict) or "npu_path" not in config or "bench_path" not in config:
        raise UsageError(f"{path} must be an object with npu_path and bench_path.")
    args = ["-tp", str(config["npu_path"]), "-gp", str(config["bench_path"])]
    if config.get("is_print_compare_log", True) is True and not os.path.isdir(str(config["npu_path"])):
        args.append("-tensor_log")
    if "rank_id" in config or "step_id" in config:
        for key, option in (("rank_id", "--rank"), ("step_id", "--step")):
            values = config.get(key) or []
            if not isinstance(values, list) or any(not isinstance(v, int) for v in values):
                raise UsageError(f"{path}: {key} must be a list of integers.")
            args += [option, ",".join(str(v) for v in values)] if values else [option]
    return args
