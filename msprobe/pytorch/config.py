"""Configuration of the PyTorch data collector: config.json and keyword arguments, validated up front."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from msprobe.errors import MsprobeError

TASKS = ("statistics", "tensor")
LEVELS = ("L0", "L1", "mix")
DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
_TASK_KEYS = ("scope", "list", "data_mode", "summary_mode")
_KNOWN_KEYS = {"task", "level", "dump_path", "step", "rank", "extra_info", "async_dump", "seed",
               "is_deterministic", "enable_dataloader", "framework", *TASKS, *_TASK_KEYS}


class DumpConfigError(MsprobeError):
    """The collector configuration (config.json or keyword arguments) is invalid."""


@dataclass
class DumpConfig:
    task: str = "statistics"
    level: str = "L1"
    dump_path: str = "./dump_path"
    step: list = field(default_factory=list)
    rank: list = field(default_factory=list)
    scope: list = field(default_factory=list)
    api_list: list = field(default_factory=list)
    data_mode: list = field(default_factory=lambda: ["all"])
    summary_mode: str = "statistics"
    async_dump: bool = False

    def wants_step(self, step: int) -> bool:
        return not self.step or step in self.step

    def wants_rank(self, rank) -> bool:
        return not self.rank or rank is None or rank in self.rank


def _int_list(name: str, value) -> list:
    """A list of non-negative ints; items may also be "a-b" ranges (inclusive)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DumpConfigError(f"config '{name}' must be a list of non-negative integers, got {value!r}")
    result = []
    for item in value:
        if isinstance(item, bool):
            raise DumpConfigError(f"config '{name}' must contain integers, got {item!r}")
        if isinstance(item, int) and item >= 0:
            result.append(item)
            continue
        if isinstance(item, str) and item.count("-") == 1:
            low, high = item.split("-")
            if low.strip().isdigit() and high.strip().isdigit() and int(low) <= int(high):
                result.extend(range(int(low), int(high) + 1))
                continue
        raise DumpConfigError(f"config '{name}' must contain non-negative integers or 'a-b' ranges, "
                              f"got {item!r}")
    return sorted(set(result))


def _str_list(name: str, value) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DumpConfigError(f"config '{name}' must be a list of strings, got {value!r}")
    return list(value)


def _check_dump_path(path) -> str:
    if not isinstance(path, str) or not path.strip():
        raise DumpConfigError("config 'dump_path' must be a non-empty string")
    path = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise DumpConfigError(f"dump_path {path} cannot be created: {exc.strerror or exc}") from exc
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise DumpConfigError(f"dump_path {path} is not a writable directory")
    return path


def load_config(config_path: str | None = None, **overrides) -> DumpConfig:
    """Merge config.json (if given) with keyword overrides and validate everything."""
    raw: dict = {}
    if config_path is not None:
        try:
            with open(config_path, encoding="utf-8") as handle:
                raw = json.load(handle)
        except OSError as exc:
            raise DumpConfigError(f"cannot read config file {config_path}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise DumpConfigError(f"config file {config_path} is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise DumpConfigError(f"config file {config_path} must hold a JSON object")
    unknown = set(overrides) - _KNOWN_KEYS
    if unknown:
        raise DumpConfigError(f"unknown collector option(s): {', '.join(sorted(unknown))}")
    raw.update({k: v for k, v in overrides.items() if v is not None})

    task = raw.get("task", "statistics")
    if task not in TASKS:
        raise DumpConfigError(f"config 'task' must be one of {', '.join(TASKS)}, got {task!r}")
    level = raw.get("level", "L1")
    if level not in LEVELS:
        raise DumpConfigError(f"config 'level' must be one of {', '.join(LEVELS)}, got {level!r}")
    section = raw.get(task, {})
    if not isinstance(section, dict):
        raise DumpConfigError(f"config section '{task}' must be an object")
    # keys of the task section; top-level keys (and keyword arguments) win
    merged = dict(section)
    merged.update({k: raw[k] for k in _TASK_KEYS if k in raw})

    data_mode = _str_list("data_mode", merged.get("data_mode", ["all"])) or ["all"]
    bad = [m for m in data_mode if m not in DATA_MODES]
    if bad:
        raise DumpConfigError(f"config 'data_mode' values must be among {', '.join(DATA_MODES)}, got {bad}")
    summary_mode = merged.get("summary_mode", "statistics")
    if summary_mode not in SUMMARY_MODES:
        raise DumpConfigError(f"config 'summary_mode' must be one of {', '.join(SUMMARY_MODES)}, "
                              f"got {summary_mode!r}")
    async_dump = raw.get("async_dump", False)
    if async_dump not in (False, None):
        raise DumpConfigError("config 'async_dump' true is not supported by this collector; set it to false")
    return DumpConfig(task=task, level=level, dump_path=_check_dump_path(raw.get("dump_path", "./dump_path")),
                      step=_int_list("step", raw.get("step")), rank=_int_list("rank", raw.get("rank")),
                      scope=_str_list("scope", merged.get("scope")),
                      api_list=_str_list("list", merged.get("list")),
                      data_mode=data_mode, summary_mode=summary_mode, async_dump=False)
