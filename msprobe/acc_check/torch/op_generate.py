"""op_generate: one dumped PyTorch API -> a standalone script that replays it on the device under test and on the
CPU benchmark and prints the comparison table (spec §8)."""

from __future__ import annotations

import json
import os
import re

from msprobe.errors import MsprobeError, os_error_text

DEFAULTS = {"dump_json_path": "./dump.json", "api_name": "", "extract_api_path": "", "propagation": "forward",
            "data_mode": "random_data", "random_seed": 1234, "iter_times": 1}
API_TYPES = ("Functional", "Tensor", "Torch")
MAX_ITER = 1000
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# The entries a script is made of: <Type>.<name>.<N>.<direction>, nothing else (an entry name becomes a file name
# and is shown by the script: it must be a plain identifier path, whatever the dump holds).
ENTRY_KEY = re.compile(r"^(Functional|Tensor|Torch)\.([A-Za-z_][A-Za-z0-9_]{0,99})\.([0-9]{1,9})\.(forward|backward)$")
DATA_KEYS = ("input_args", "input_kwargs", "grad_input", "input", "output", "grad_output")


class OpGenerateError(MsprobeError):
    """A config_op.json or an API that op_generate cannot turn into a script."""


def load_config(path: str) -> dict:
    """The checked fields of config_op.json. Without dump_json_path, an existing `extract_api_path` holds the API
    (extracted before; api_name, when given, must name it); else the API `api_name` is extracted from
    `dump_json_path` (default ./dump.json). Relative paths are relative to the config file."""
    from msprobe.dump.reader import load_json_object

    path, raw = load_json_object(path, "config_op.json", OpGenerateError)
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise OpGenerateError(f"{path}: unknown field {unknown[0]!r} (fields: {', '.join(DEFAULTS)}).")
    config = {**DEFAULTS, **raw}
    base = os.path.dirname(os.path.abspath(path))
    name = config["api_name"]
    if name is None:
        name = config["api_name"] = ""
    if not isinstance(name, str) or len(name) > 30 or (name and not SAFE_NAME.match(name)):
        raise OpGenerateError(f"{path}: api_name must be a name like Functional.softmax.0 (at most 30 characters "
                              f"of letters, digits, '_', '.', '-'), not {name!r}.")
    if config["propagation"] not in ("forward", "backward"):
        raise OpGenerateError(f"{path}: propagation must be forward or backward, not {config['propagation']!r}.")
    if config["data_mode"] not in ("random_data", "real_data"):
        raise OpGenerateError(f"{path}: data_mode must be random_data or real_data, not {config['data_mode']!r}.")
    for key in ("random_seed", "iter_times"):
        if not isinstance(config[key], int) or isinstance(config[key], bool):
            raise OpGenerateError(f"{path}: {key} must be an integer.")
    if not 0 < config["iter_times"] <= MAX_ITER:
        raise OpGenerateError(f"{path}: iter_times must be in 1..{MAX_ITER}.")
    for key in ("dump_json_path", "extract_api_path"):
        if config[key] is None:
            config[key] = ""
        if not isinstance(config[key], str):
            raise OpGenerateError(f"{path}: {key} must be a path.")
        if config[key] and not os.path.isabs(config[key]):
            config[key] = os.path.join(base, config[key])   # relative paths are relative to config_op.json
    extracted = config["extract_api_path"] and os.path.isfile(config["extract_api_path"])
    if not raw.get("dump_json_path") and (extracted or not name):
        if not config["extract_api_path"]:
            raise OpGenerateError(f"{path}: give api_name (the API to extract from dump_json_path) or "
                                  "extract_api_path (an API extracted before).")
        config["dump_json_path"] = ""             # the API is read from extract_api_path
    elif not name:
        raise OpGenerateError(f"{path}: dump_json_path is given without api_name; name the API to extract "
                              "(e.g. Functional.softmax.0), or leave both out to use extract_api_path.")
    if not config["dump_json_path"] and not config["extract_api_path"]:
        raise OpGenerateError(f"{path}: give dump_json_path (a dump.json) or extract_api_path (an extracted API).")
    if config["dump_json_path"] and config["extract_api_path"]:
        for other, what in ((config["dump_json_path"], "dump_json_path"), (path, "the config file itself")):
            if _same_file(config["extract_api_path"], other):
                raise OpGenerateError(f"{path}: extract_api_path {config['extract_api_path']} is {what}; "
                                      "op_generate never writes over one of its inputs, give another file name.")
    return config


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _checked_entries(entries, where: str) -> dict:
    """The extracted API with its names checked (ENTRY_KEY) and NaN/Infinity as floats."""
    from msprobe.acc_check.common import decode_numbers

    if not isinstance(entries, dict) or not entries or len(entries) > 2:
        raise OpGenerateError(f"the extracted API must be an object with 1 or 2 entries (forward, backward), got "
                              f"{len(entries) if isinstance(entries, dict) else type(entries).__name__} in {where}.")
    for key, value in entries.items():
        if not ENTRY_KEY.match(key):
            raise OpGenerateError(f"entry {key[:80]!r} of {where} is not named <Type>.<name>.<N>.forward|backward "
                                  f"(Type {', '.join(API_TYPES)}; name letters, digits and '_'); refused.")
        if not isinstance(value, dict):
            raise OpGenerateError(f"entry {key} of {where} is not an object.")
    return decode_numbers(entries)


def _absolute(node, directory: str):
    if isinstance(node, list):
        return [_absolute(element, directory) for element in node]
    if isinstance(node, dict):
        out = {key: _absolute(value, directory) for key, value in node.items()}
        if isinstance(node.get("data_name"), str):
            out["data_name"] = os.path.join(directory, os.path.basename(node["data_name"]))
        return out
    return node


def extract(config: dict) -> dict:
    """The entries of the API (forward first), written to extract_api_path when set; data_name made absolute."""
    from msprobe.dump.paths import check_input_file, tensor_dir_of
    from msprobe.dump.reader import load_json
    from msprobe.io import write_text

    if not config["dump_json_path"]:
        path = check_input_file(config["extract_api_path"], "extract_api_path")
        entries = _checked_entries(load_json(path, "extracted API file"), path)
        if config["api_name"]:
            foreign = [key for key in entries if not key.startswith(config["api_name"] + ".")]
            if foreign:
                raise OpGenerateError(f"{path} holds {foreign[0]}, not the API {config['api_name']} of api_name.")
        return entries
    path = check_input_file(config["dump_json_path"], "dump_json_path")
    content = load_json(path, "dump.json")
    if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
        raise OpGenerateError(f"{path} is not a msprobe dump.json: it needs an object 'data'.")
    framework = str(content.get("framework", "pytorch")).lower()
    if framework not in ("pytorch", "pt"):
        raise OpGenerateError(f"{path} is a {framework} dump; op_generate writes PyTorch scripts only.")
    prefix = config["api_name"] + "."
    directory = tensor_dir_of(path, content.get("dump_data_dir"))
    found = {key: value for key, value in content["data"].items() if key.startswith(prefix) and len(key) > len(prefix)}
    if not found:
        raise OpGenerateError(f"{config['api_name']} is not in {path} (no key {config['api_name']}.*).")
    entries = _checked_entries(found, path)
    entries = {key: {k: (_absolute(v, directory) if k in DATA_KEYS else v) for k, v in value.items()}
               for key, value in entries.items()}
    if config["extract_api_path"]:
        target = config["extract_api_path"]
        try:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            write_text(target, json.dumps(entries, indent=4) + "\n")
        except OSError as exc:
            raise OpGenerateError(f"cannot write extract_api_path: {os_error_text(exc)}.") from None
    return entries


def script_config(config: dict, entries: dict) -> dict:
    from msprobe.acc_check.guard import side_effect
    from msprobe.acc_check.torch.inputs import data_names
    from msprobe.acc_check.torch.standards import standard_of
    from msprobe.dump.paths import safe_tensor_path

    forward_key = next((k for k in entries if k.endswith(".forward")), None)
    if forward_key is None:
        raise OpGenerateError(f"no forward entry of {config['api_name']} (keys: {', '.join(entries)}).")
    backward_key = forward_key[: -len(".forward")] + ".backward"
    if config["propagation"] == "backward" and backward_key not in entries:
        raise OpGenerateError(f"propagation is backward but {backward_key} is not in the dump.")
    api_type, api_name = ENTRY_KEY.match(forward_key).group(1, 2)
    touches = side_effect(forward_key[: -len(".forward")])
    if touches:
        raise OpGenerateError(f"{forward_key} {touches}; op_generate writes no script for APIs that touch files, "
                              "processes or the network.")
    forward, backward = entries[forward_key], entries.get(backward_key)
    _check_rebuildable(forward_key, forward)
    if config["data_mode"] == "real_data":
        wanted = data_names(forward.get("input_args")) + data_names(forward.get("input_kwargs"))
        if config["propagation"] == "backward":
            wanted += data_names(backward.get("grad_input") or backward.get("input"))
        if not wanted:
            raise OpGenerateError(f"{forward_key} has no tensor files (data_name): real_data needs a tensor dump.")
        refused = [reason for reason in (safe_tensor_path(os.path.dirname(name), os.path.basename(name))[1]
                                         for name in wanted) if reason]
        if refused:
            raise OpGenerateError(f"real_data: {refused[0]} ({len(refused)} of {len(wanted)} tensor files missing "
                                  "or refused).")
    key = backward_key if config["propagation"] == "backward" else forward_key
    return {"api_type": api_type, "api_name": api_name, "full_name": key, "propagation": config["propagation"],
            "data_mode": config["data_mode"], "seed": config["random_seed"], "iter_times": config["iter_times"],
            "standard": standard_of(api_name), "forward": forward,
            "backward": backward if config["propagation"] == "backward" else None}


def _check_rebuildable(key: str, record: dict) -> None:
    """Refuse an API whose tensors the script could not rebuild (a shape that is not a list of non-negative
    integers, a dtype torch does not have), as acc_check skips it: no script that fails when run."""
    from msprobe.acc_check.guard import tensor_leaves
    from msprobe.acc_check.torch.inputs import InputError, torch_dtype

    try:
        for leaf in tensor_leaves([record.get("input_args"), record.get("input_kwargs")]):
            torch_dtype(leaf.get("dtype"))
    except (ValueError, InputError) as exc:
        what = f"{key} has {exc}" if isinstance(exc, ValueError) else f"{key}: {str(exc).rstrip('.')}"
        raise OpGenerateError(f"{what}; op_generate writes no script for inputs it cannot rebuild.") from None


HEADER = ('"""Replay one dumped PyTorch API on the device under test and on the CPU benchmark, and print the '
          'comparison\nand the verdict of every metric.\n\nGenerated by `msprobe op_generate`: the API, its dumped '
          'records and the options are the CONFIG\nliteral at the end of this file (JSON, read when the script '
          'runs). Run: python <this file>\n"""\n')


def render(script: dict) -> str:
    """The script: the fixed text of op_script.py and the CONFIG literal. Nothing of the dump is spliced into the
    code: the records travel as one JSON text, written as a Python string literal (repr) and parsed at run time."""
    from msprobe.acc_check.torch import op_script

    with open(op_script.__file__, encoding="utf-8") as handle:
        body = handle.read()
    _, _, body = body.partition('"""\n')            # drop the module docstring (it ends the first '"""' line)
    config = json.dumps(script, indent=1)         # ASCII only: any other character is a \\u escape
    return (HEADER + body.lstrip("\n") + "\n\nCONFIG = json.loads(" + repr(config) + ")\n\n"
            "if __name__ == \"__main__\":\n    main(CONFIG)\n").replace("\nimport math\n",
                                                                       "\nimport json\nimport math\n", 1)


def generate(config_path: str, output_dir: str) -> tuple:
    """(script path, script config) of config_op.json; the script is written atomically into output_dir."""
    from msprobe.dump.paths import check_input_dir
    from msprobe.io import write_text

    output_dir = check_input_dir(output_dir, "output directory")
    config = load_config(config_path)
    script = script_config(config, extract(config))
    path = os.path.join(output_dir, f"{script['full_name']}.py")
    for source in (config_path, config["dump_json_path"], config["extract_api_path"]):
        if source and _same_file(path, source):
            raise OpGenerateError(f"the script {path} would replace the input {source}; choose another -o.")
    try:
        write_text(path, render(script))
        os.chmod(path, 0o750)
    except OSError as exc:
        raise OpGenerateError(f"cannot write the script: {os_error_text(exc)}.") from None
    return path, script
