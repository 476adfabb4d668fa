"""INTERIM (until the shared collector base of msprobe/collect/ is merged): configuration, statistics of a numpy
array, value records and a plain step writer. Replaced by the base; nothing else may grow here."""

from __future__ import annotations

import json
import math
import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from msprobe.dump.reader import encode_dump_json, json_number
from msprobe.errors import MsprobeError
from msprobe.io import atomic_path

TASKS = ("statistics", "tensor")
LEVELS = ("L0", "L1", "mix")


class DumpConfigError(MsprobeError):
    """The collector configuration is invalid."""


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

    def wants_step(self, step: int) -> bool:
        return not self.step or step in self.step

    def wants_rank(self, rank) -> bool:
        return not self.rank or rank is None or rank in self.rank


def load_config(config_path=None, **overrides) -> DumpConfig:
    raw = {}
    if config_path:
        with open(config_path, encoding="utf-8") as handle:
            raw = json.load(handle)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    task = raw.get("task", "statistics")
    section = dict(raw.get(task, {}))
    for key in ("scope", "list", "data_mode", "summary_mode"):
        if key in raw:
            section[key] = raw[key]
    path = os.path.abspath(raw.get("dump_path", "./dump_path"))
    os.makedirs(path, exist_ok=True)
    return DumpConfig(task=task, level=raw.get("level", "L1"), dump_path=path, step=raw.get("step") or [],
                      rank=raw.get("rank") or [], scope=section.get("scope") or [],
                      api_list=section.get("list") or [], data_mode=section.get("data_mode") or ["all"],
                      summary_mode=section.get("summary_mode", "statistics"))


def array_stats(array: np.ndarray) -> dict:
    if array.size == 0:
        return {"Max": None, "Min": None, "Mean": None, "Norm": None}
    if array.dtype == np.bool_:
        return {"Max": bool(array.any()), "Min": bool(array.all()), "Mean": None, "Norm": None}
    if np.iscomplexobj(array):
        array = np.abs(array)
    data = array.astype(np.float64, copy=False)
    if data.ndim == 0:
        value = json_number(float(data))
        return {"Max": value, "Min": value, "Mean": value, "Norm": value}
    flat = data.reshape(-1)
    return {"Max": json_number(float(flat.max())), "Min": json_number(float(flat.min())),
            "Mean": json_number(float(flat.mean())), "Norm": json_number(float(math.sqrt(np.dot(flat, flat))))}


def array_crc32(array: np.ndarray) -> str:
    return format(zlib.crc32(np.ascontiguousarray(array).tobytes()), "08x")


def builtin_record(value):
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": json_number(value)}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, slice):
        return {"type": "slice", "value": [p if isinstance(p, int) else None for p in (value.start, value.stop,
                                                                                     value.step)]}
    return None


class StepWriter:
    def __init__(self, task: str, level: str, framework: str):
        self.task, self.level, self.framework = task, level, framework
        self.data: dict = {}
        self.construct: dict = {}
        self.stacks: dict = {}
        self.directory = None

    @property
    def tensor_dir(self) -> str:
        return os.path.join(self.directory, "dump_tensor_data")

    def reset(self, directory) -> None:
        self.directory = directory
        self.data, self.construct, self.stacks = {}, {}, {}

    def add_stack(self, name, lines) -> None:
        self.stacks.setdefault(lines, []).append(name)

    def save_array(self, data_name: str, array: np.ndarray) -> None:
        os.makedirs(self.tensor_dir, exist_ok=True)
        with atomic_path(os.path.join(self.tensor_dir, data_name)) as temporary, open(temporary, "wb") as handle:
            np.save(handle, array, allow_pickle=False)

    def write(self) -> None:
        if self.directory is None:
            return
        os.makedirs(self.directory, exist_ok=True)
        dump = {"task": self.task, "level": self.level, "framework": self.framework,
                "dump_data_dir": self.tensor_dir if self.task == "tensor" else None, "data": self.data}
        stack = {str(i): [names, list(lines)] for i, (lines, names) in enumerate(self.stacks.items())}
        for file_name, content in (("dump.json", dump), ("stack.json", stack),
                                   ("construct.json", {} if self.level == "L1" else self.construct)):
            with atomic_path(os.path.join(self.directory, file_name)) as temporary, open(temporary, "wb") as out:
                out.write(encode_dump_json(content))
