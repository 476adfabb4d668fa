"""Configuration of a data collector: config.json (the reference's format) and keyword arguments, validated in
full before training starts. Every unknown key is an error naming the closest known one; step and rank lists keep
their "a-b" ranges as ranges."""

from __future__ import annotations

import bisect
import difflib
import json
import os
from dataclasses import dataclass, field

from msprobe.errors import MsprobeError

TASKS = ("statistics", "tensor")
LEVELS = ("L0", "L1", "mix")
DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5")
# which APIs the PyTorch collector dumps at L1/mix (the reference's `risk_level`; msprobe.pytorch.hooks.risk_allows):
# FOCUS (the default) leaves out the low-risk ones (casts, views, shape changes, constructors: counted, not
# dumped), ALL dumps them too, CORE only matrix products, convolutions, normalisations, embeddings, attention and
# collectives. JSON null or "" is ALL, as with the reference. The MindSpore collector reads no risk level.
RISK_LEVELS = ("CORE", "FOCUS", "ALL")
# the keys of a task section; they may also be given at the top level or as keyword arguments
SECTION_KEYS = ("scope", "list", "data_mode", "summary_mode")
# top-level keys of the reference's config.json that change nothing here (accepted and ignored)
IGNORED_KEYS = ("extra_info", "seed", "is_deterministic", "enable_dataloader", "framework", "precision",
                "dump_enable", "custom_op_namespaces")
# sections of the reference's other tasks: accepted (the reference's own config.json holds them), never read
# a config.json that replaces the arguments of every PrecisionDebugger made in the process (`msprobe triage` sets
# it, so that a training script with its own debugger dumps what the triage asks for)
FORCED_CONFIG = "MSPROBE_DUMP_CONFIG"
# the plan of `msprobe triage`'s injection (triage/inject.py), set in the processes of the commands it runs
TRIAGE_PLAN = "MSPROBE_TRIAGE_PLAN"
OTHER_SECTIONS = ("acc_check", "run_ut", "overflow_check", "free_benchmark", "grad_probe", "structure",
                  "exception_dump", "load")


class DumpConfigError(MsprobeError):
    """The collector configuration (config.json or keyword arguments) is invalid."""


@dataclass(frozen=True)
class ConfigSpec:
    """What one framework's collector accepts. A framework adds its own keys with dataclasses.replace."""

    framework: str = "pytorch"
    tasks: tuple = TASKS
    levels: tuple = LEVELS
    ignored_keys: tuple = IGNORED_KEYS          # top-level keys accepted and ignored
    section_ignored: tuple = ()                 # keys of a task section accepted and ignored
    other_sections: tuple = OTHER_SECTIONS      # sections of tasks this collector does not run

    @property
    def top_keys(self) -> tuple:
        return ("task", "level", "dump_path", "step", "rank", "async_dump", "risk_level", *self.ignored_keys,
                *self.tasks, *self.other_sections, *SECTION_KEYS)


PYTORCH = ConfigSpec()


class Ranges:
    """A set of non-negative integers kept as sorted, disjoint, inclusive ranges: "0-100000000000" costs two
    integers. Empty means "every one" in DumpConfig.wants_step/wants_rank."""

    __slots__ = ("_lows", "_highs")

    def __init__(self, intervals=()):
        merged: list = []
        for low, high in sorted(intervals):
            if merged and low <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        self._lows = tuple(low for low, _ in merged)
        self._highs = tuple(high for _, high in merged)

    @classmethod
    def parse(cls, name: str, value) -> Ranges:
        """A config list of non-negative ints and "a-b" ranges (inclusive); None or [] is empty."""
        if value is None:
            return cls()
        if not isinstance(value, list):
            raise DumpConfigError(f"config '{name}' must be a list of non-negative integers or 'a-b' ranges, "
                                  f"got {value!r}")
        intervals = []
        for item in value:
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                intervals.append((item, item))
                continue
            if isinstance(item, str) and item.count("-") == 1:
                low, high = (part.strip() for part in item.split("-"))
                if low.isascii() and high.isascii() and low.isdigit() and high.isdigit() and int(low) <= int(high):
                    intervals.append((int(low), int(high)))
                    continue
            raise DumpConfigError(f"config '{name}' must contain non-negative integers or 'a-b' ranges (a <= b), "
                                  f"got {item!r}")
        return cls(intervals)

    @property
    def intervals(self) -> tuple:
        return tuple(zip(self._lows, self._highs))

    def __contains__(self, number) -> bool:
        at = bisect.bisect_right(self._lows, number) - 1
        return at >= 0 and number <= self._highs[at]

    def __bool__(self) -> bool:
        return bool(self._lows)

    def __iter__(self):
        for low, high in zip(self._lows, self._highs):
            yield from range(low, high + 1)

    def __eq__(self, other) -> bool:
        return isinstance(other, Ranges) and self.intervals == other.intervals

    def __hash__(self) -> int:
        return hash(self.intervals)

    def __repr__(self) -> str:
        parts = [str(low) if low == high else f"{low}-{high}" for low, high in self.intervals]
        return f"Ranges([{', '.join(parts)}])"


@dataclass(frozen=True)
class DumpConfig:
    task: str = "statistics"
    level: str = "L1"
    dump_path: str = "./dump_path"
    step: Ranges = field(default_factory=Ranges)
    rank: Ranges = field(default_factory=Ranges)
    scope: tuple = ()
    api_list: tuple = ()
    data_mode: tuple = ("all",)
    summary_mode: str = "statistics"
    async_dump: bool = False
    framework: str = "pytorch"
    risk_level: str = "FOCUS"

    def wants_step(self, step: int) -> bool:
        return not self.step or step in self.step

    def wants_rank(self, rank) -> bool:
        return not self.rank or rank is None or rank in self.rank


def _closest(key, known) -> str:
    found = difflib.get_close_matches(str(key), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean '{found[0]}'?)" if found else ""


def _check_keys(keys, known, where: str) -> None:
    for key in keys:
        if key not in known:
            raise DumpConfigError(f"unknown key {key!r} in {where}{_closest(key, known)}; known keys: "
                                  f"{', '.join(sorted(known))}")


def _str_list(name: str, value) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DumpConfigError(f"config '{name}' must be a list of strings, got {value!r}")
    return tuple(value)


def _path_text(name: str, value) -> str:
    """A path given as str or os.PathLike, as text; an int (a file descriptor), bytes or a NUL are refused."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise DumpConfigError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__} {value!r}")
    if not value.strip():
        raise DumpConfigError(f"{name} must be a non-empty path")
    if "\x00" in value:
        raise DumpConfigError(f"{name} must not contain a NUL character: {value!r}")
    return value


def check_dump_path(path) -> str:
    """The absolute dump_path, created if missing; a clear DumpConfigError when it cannot be written."""
    path = os.path.abspath(os.path.expanduser(_path_text("config 'dump_path'", path)))
    try:
        os.makedirs(path, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise DumpConfigError(f"dump_path {path!r} cannot be created: {getattr(exc, 'strerror', None) or exc}") \
            from None
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise DumpConfigError(f"dump_path {path!r} is not a writable directory")
    return path


def read_config_file(config_path) -> dict:
    path = _path_text("config_path", config_path)
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except OSError as exc:
        raise DumpConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise DumpConfigError(f"config file {path} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise DumpConfigError(f"config file {path} must hold a JSON object")
    return raw


def load_config(config_path=None, spec: ConfigSpec = PYTORCH, **overrides) -> DumpConfig:
    """Merge config.json (if given) with keyword overrides (None values ignored) and validate everything: unknown
    keys at the top level, in the task sections and among the keyword arguments are errors. When the environment
    variable MSPROBE_DUMP_CONFIG names a config.json, that file replaces config_path and the keyword arguments."""
    forced = os.environ.get(FORCED_CONFIG)
    if forced:
        config_path, overrides = forced, {}
    raw = read_config_file(config_path) if config_path is not None else {}
    _check_keys(raw, spec.top_keys, "the config file")
    _check_keys(overrides, spec.top_keys, "the keyword arguments")
    raw.update({k: v for k, v in overrides.items() if v is not None})

    task = raw.get("task", "statistics")
    if task not in spec.tasks:
        raise DumpConfigError(f"config 'task' must be one of {', '.join(spec.tasks)}, got {task!r}"
                              f"{_closest(task, spec.tasks) if isinstance(task, str) else ''}")
    level = raw.get("level", "L1")
    if level not in spec.levels:
        raise DumpConfigError(f"config 'level' must be one of {', '.join(spec.levels)}, got {level!r}")
    for name in spec.tasks:          # every section of ours is checked, the chosen one is read
        section = raw.get(name, {})
        if not isinstance(section, dict):
            raise DumpConfigError(f"config section '{name}' must be an object, got {type(section).__name__}")
        _check_keys(section, (*SECTION_KEYS, *spec.section_ignored), f"the '{name}' section")
    merged = dict(raw.get(task, {}))
    merged.update({k: raw[k] for k in SECTION_KEYS if k in raw})     # top-level keys and keywords win

    data_mode = _str_list("data_mode", merged.get("data_mode", ["all"])) or ("all",)
    bad = [m for m in data_mode if m not in DATA_MODES]
    if bad:
        raise DumpConfigError(f"config 'data_mode' values must be among {', '.join(DATA_MODES)}, got {bad}")
    summary_mode = merged.get("summary_mode", "statistics")
    if summary_mode not in SUMMARY_MODES:
        raise DumpConfigError(f"config 'summary_mode' must be one of {', '.join(SUMMARY_MODES)}, "
                              f"got {summary_mode!r}")
    if summary_mode != "statistics" and task != "statistics":
        raise DumpConfigError(f"config 'summary_mode' {summary_mode!r} applies to task statistics only; task {task!r} "
                              "records the statistics and saves every tensor: remove 'summary_mode' or use task "
                              "statistics")
    async_dump = raw.get("async_dump", False)
    if async_dump is not None and not isinstance(async_dump, bool):
        raise DumpConfigError(f"config 'async_dump' must be a boolean (true or false), got {async_dump!r} "
                              f"({type(async_dump).__name__})")
    if async_dump:
        raise DumpConfigError("config 'async_dump' true is not supported by this collector; set it to false")
    risk_level = raw.get("risk_level", "FOCUS")
    if risk_level is None or risk_level == "":
        risk_level = "ALL"
    if not isinstance(risk_level, str) or risk_level not in RISK_LEVELS:
        raise DumpConfigError(f"config 'risk_level' must be one of {', '.join(RISK_LEVELS)}, got {risk_level!r}"
                              f"{_closest(risk_level, RISK_LEVELS) if isinstance(risk_level, str) else ''}")
    return DumpConfig(task=task, level=level, dump_path=check_dump_path(raw.get("dump_path", "./dump_path")),
                      step=Ranges.parse("step", raw.get("step")), rank=Ranges.parse("rank", raw.get("rank")),
                      scope=_str_list("scope", merged.get("scope")), api_list=_str_list("list", merged.get("list")),
                      data_mode=data_mode, summary_mode=summary_mode, async_dump=False, framework=spec.framework,
                      risk_level=risk_level)
