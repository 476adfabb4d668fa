"""op_generate: one dumped PyTorch API -> a standalone script that replays it on the device under test and on the
CPU benchmark and prints the comparison table (spec §8)."""

from __future__ import annotations

import json
import os
import re

from msprobe.errors import MsprobeError

DEFAULTS = {"dump_json_path": "./dump.json", "api_name": "", "extract_api_path": "", "propagation": "forward",
            "data_mode": "random_data", "random_seed": 1234, "iter_times": 1}
API_TYPES = ("Functional", "Tensor", "Torch")
MAX_ITER = 1000
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
DATA_KEYS = ("input_args", "input_kwargs", "grad_input", "input", "output", "grad_output")


class OpGenerateError(MsprobeError):
    """A config_op.json or an API that op_generate cannot turn into a script."""


def load_config(path: str) -> dict:
    from msprobe.dump.paths import load_json_object

    path, raw = load_json_object(path, "config_op.json", OpGenerateError)
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        raise OpGenerateError(f"{path}: unknown field {unknown[0]!r} (fields: {', '.join(DEFAULTS)}).")
    config = {**DEFAULTS, **raw}
    base = os.path.dirname(os.path.abspath(path))
    name = config["api_name"]
    if not isinstance(name, str) or not name or len(name) > 30 or not SAFE_NAME.match(name):
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
        if config[key] and not os.path.isabs(config[key]):
            config[key] = os.path.join(base, config[key])   # relative paths are relative to config_op.json
    if not config["dump_json_path"] and not config["extract_api_path"]:
        raise OpGenerateError(f"{path}: give dump_json_path (a dump.json) or extract_api_path (an extracted API).")
    return config


def _tensor_dir(dump_path: str, content: dict) -> str:
    """dump_data_dir when it exists here, else dump_tensor_data beside dump.json (a dump moved elsewhere)."""
    recorded = content.get("dump_data_dir")
    if recorded and os.path.isdir(recorded):
        return recorded
    return os.path.join(os.path.dirname(os.path.abspath(dump_path)), "dump_tensor_data")


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
    from msprobe.dump.paths import check_input_file
    from msprobe.dump.reader import load_json
    from msprobe.io import write_text

    if not config["dump_json_path"]:
        path = check_input_file(config["extract_api_path"], "extract_api_path")
        entries = load_json(path, "extracted API file")
    else:
        path = check_input_file(config["dump_json_path"], "dump_json_path")
        content = load_json(path, "dump.json")
        if not isinstance(content, dict) or not isinstance(content.get("data"), dict):
            raise OpGenerateError(f"{path} is not a msprobe dump.json: it needs an object 'data'.")
        framework = str(content.get("framework", "pytorch")).lower()
        if framework not in ("pytorch", "pt"):
            raise OpGenerateError(f"{path} is a {framework} dump; op_generate writes PyTorch scripts only.")
        pattern = re.compile(rf"^{re.escape(config['api_name'])}\..+")
        directory = _tensor_dir(path, content)
        entries = {key: {k: (_absolute(v, directory) if k in DATA_KEYS else v) for k, v in value.items()}
                   for key, value in content["data"].items() if pattern.match(key) and isinstance(value, dict)}
        if not entries:
            raise OpGenerateError(f"{config['api_name']} is not in {path} (no key {config['api_name']}.*).")
        if config["extract_api_path"]:
            os.makedirs(os.path.dirname(config["extract_api_path"]) or ".", exist_ok=True)
            write_text(config["extract_api_path"], json.dumps(entries, indent=4) + "\n")
    if not isinstance(entries, dict) or not entries or len(entries) > 2:
        raise OpGenerateError(f"the extracted API must be an object with 1 or 2 entries (forward, backward), got "
                              f"{len(entries) if isinstance(entries, dict) else type(entries).__name__}.")
    return entries


def script_config(config: dict, entries: dict) -> dict:
    from msprobe.acc_check.inputs import data_names
    from msprobe.acc_check.standards import standard_of

    forward_key = next((k for k in entries if k.endswith(".forward")), None)
    if forward_key is None:
        raise OpGenerateError(f"no forward entry of {config['api_name']} (keys: {', '.join(entries)}).")
    backward_key = forward_key[: -len(".forward")] + ".backward"
    if config["propagation"] == "backward" and backward_key not in entries:
        raise OpGenerateError(f"propagation is backward but {backward_key} is not in the dump.")
    parts = forward_key.split(".")
    api_type = parts[0]
    if api_type not in API_TYPES or len(parts) != 4:
        raise OpGenerateError(f"{forward_key}: op_generate supports {', '.join(API_TYPES)} APIs named "
                              "<Type>.<name>.<N>.forward.")
    api_name = parts[1]
    forward, backward = entries[forward_key], entries.get(backward_key)
    if config["data_mode"] == "real_data":
        wanted = data_names(forward.get("input_args")) + data_names(forward.get("input_kwargs"))
        if config["propagation"] == "backward":
            wanted += data_names(backward.get("grad_input") or backward.get("input"))
        if not wanted:
            raise OpGenerateError(f"{forward_key} has no tensor files (data_name): real_data needs a tensor dump.")
        missing = [name for name in wanted if not os.path.isfile(name)]
        if missing:
            raise OpGenerateError(f"real_data: tensor file {missing[0]} is missing "
                                  f"({len(missing)} of {len(wanted)} missing).")
    key = backward_key if config["propagation"] == "backward" else forward_key
    return {"api_type": api_type, "api_name": api_name, "full_name": key, "propagation": config["propagation"],
            "data_mode": config["data_mode"], "seed": config["random_seed"], "iter_times": config["iter_times"],
            "standard": standard_of(api_name), "forward": forward,
            "backward": backward if config["propagation"] == "backward" else None}


def render(script: dict) -> str:
    from msprobe.acc_check import op_script

    with open(op_script.__file__, encoding="utf-8") as handle:
        body = handle.read()
    _, _, body = body.partition('"""\n')            # drop the module docstring (it ends the first '"""' line)
    header = (f'"""Replay {script["full_name"]} on the device under test and on the CPU benchmark, and print '
              f'the comparison.\n\nGenerated by `msprobe op_generate` ({script["data_mode"]}, seed '
              f'{script["seed"]}). Run: python {script["full_name"]}.py\n"""\n')
    config = json.dumps(script, indent=1)
    return (header + body.lstrip("\n") + "\n\nCONFIG = json.loads(" + repr(config) + ")\n\n"
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
    write_text(path, render(script))
    os.chmod(path, 0o750)
    return path, script
