"""Which APIs a run checks: `-f/--filter_api` de-duplication (spec §5.2) and the white/black lists and error-data
directory of a `-config` file (spec §2.3). Framework-independent: both backends use it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from msprobe.dump.reader import load_json_object
from msprobe.errors import MsprobeError

CONFIG_SECTIONS = ("acc_check", "run_ut")   # 26.x name first, then the 1.x one
CONFIG_KEYS = ("white_list", "black_list", "error_data_path")


class ConfigError(MsprobeError):
    """A -config file that cannot be used."""


@dataclass(frozen=True)
class ApiLists:
    """The white and black list of API names (`matmul`, not `Torch.matmul.0`)."""

    white: frozenset = frozenset()
    black: frozenset = frozenset()

    def excluded(self, api_name: str) -> bool:
        return api_name in self.black or (bool(self.white) and api_name not in self.white)


@dataclass(frozen=True)
class CheckOptions:
    """The options of one acc_check run besides the dump, the output directory and resuming."""

    filter_api: bool = False                 # -f: de-duplicate forward APIs with equal arguments
    lists: ApiLists = field(default_factory=ApiLists)
    error_data_path: str = ""                # -config error_data_path; "" = the output directory
    jit_compile: bool = False                # -j (PyTorch on Ascend NPU only)
    device_id: int = 0                       # the first -d id
    max_abs_err: float | None = None         # MindSpore pass rule (DECISIONS 16); None = 0.0001
    memory_budget: int = 0                   # --memory-budget: bytes one API may use; 0 = guard.default_budget()


def load_config(path: str, known_names, framework: str) -> tuple:
    """(ApiLists, error_data_path) of the `acc_check` (1.x: `run_ut`) section of a msprobe config.json. List
    entries must be API names of the framework (`known_names(name)` says whether one is); error_data_path must be
    an existing directory."""
    path, config = load_json_object(path, "-config file", ConfigError)
    section = next((config[key] for key in CONFIG_SECTIONS if key in config), None)
    if section is None:
        raise ConfigError(f"-config {path} has no \"acc_check\" (or 1.x \"run_ut\") section with white_list, "
                          "black_list or error_data_path.")
    if not isinstance(section, dict):
        raise ConfigError(f"-config {path}: the acc_check section must be an object.")
    unknown_keys = sorted(set(section) - set(CONFIG_KEYS))
    if unknown_keys:
        raise ConfigError(f"-config {path}: unknown key(s) in the acc_check section: {', '.join(unknown_keys)} "
                          f"(allowed: {', '.join(CONFIG_KEYS)}).")
    lists = {}
    for key in ("white_list", "black_list"):
        values = section.get(key) or []
        if not isinstance(values, list) or any(not isinstance(v, str) or not v for v in values):
            raise ConfigError(f"-config {path}: {key} must be a list of API names.")
        unknown = [v for v in values if not known_names(v)]
        if unknown:
            raise ConfigError(f"-config {path}: {key} names {len(unknown)} API(s) that are not {framework} APIs "
                              f"acc_check knows (first: {unknown[0]!r}); use names such as 'matmul', not "
                              "'Torch.matmul.0'.")
        lists[key] = frozenset(values)
    error_data_path = section.get("error_data_path") or ""
    if not isinstance(error_data_path, str):
        raise ConfigError(f"-config {path}: error_data_path must be a path.")
    if error_data_path and not os.path.isdir(error_data_path):
        raise ConfigError(f"-config {path}: error_data_path {error_data_path} is not an existing directory.")
    return ApiLists(lists["white_list"], lists["black_list"]), error_data_path


def filter_apis(data: dict, names: list) -> list:
    """`-f`: drop a forward API when an earlier kept API of the same base name (the key without its call index,
    `Torch.matmul`) has equal input_kwargs and equal tensor-argument records apart from Max and Min (spec §5.2;
    other argument kinds are not compared). APIs without a forward record are kept."""
    kept: dict = {}
    out = []
    for name in names:
        record = data.get(f"{name}.forward")
        if not isinstance(record, dict):
            out.append(name)
            continue
        args = [{k: v for k, v in arg.items() if k not in ("Max", "Min")}
                for arg in record.get("input_args") or [] if isinstance(arg, dict)]
        signature = (record.get("input_kwargs"), args)
        seen = kept.setdefault(name.rsplit(".", 1)[0], [])
        if signature in seen:
            continue
        seen.append(signature)
        out.append(name)
    return out
