"""Accumulates one step's entries, stacks and hierarchy and writes dump.json/stack.json/construct.json."""

from __future__ import annotations

import os

import torch

from msprobe.dump.reader import encode_dump_json
from msprobe.io import atomic_path


class StepWriter:
    def __init__(self, task: str, level: str):
        self.task = task
        self.level = level
        self.data: dict = {}
        self.construct: dict = {}
        self.stacks: dict = {}          # stack lines tuple -> entry names
        self.directory: str | None = None

    @property
    def tensor_dir(self) -> str:
        return os.path.join(self.directory, "dump_tensor_data")

    def reset(self, directory: str) -> None:
        self.directory = directory
        self.data = {}
        self.construct = {}
        self.stacks = {}

    def add_stack(self, name: str, lines: tuple) -> None:
        self.stacks.setdefault(lines, []).append(name)

    def save_tensor(self, data_name: str, tensor: torch.Tensor) -> None:
        os.makedirs(self.tensor_dir, exist_ok=True)
        path = os.path.join(self.tensor_dir, data_name)
        with atomic_path(path) as temporary:
            torch.save(tensor.detach().cpu().contiguous().clone(), temporary)

    def write(self) -> None:
        if self.directory is None:
            return
        os.makedirs(self.directory, exist_ok=True)
        tensor_dir = self.tensor_dir if self.task == "tensor" else None
        dump = {"task": self.task, "level": self.level, "framework": "pytorch", "dump_data_dir": tensor_dir,
                "data": self.data}
        _write_json(os.path.join(self.directory, "dump.json"), dump)
        stack = {str(i): [names, list(lines)] for i, (lines, names) in enumerate(self.stacks.items())}
        _write_json(os.path.join(self.directory, "stack.json"), stack)
        construct = {} if self.level == "L1" else self.construct
        _write_json(os.path.join(self.directory, "construct.json"), construct)


def _write_json(path: str, content) -> None:
    """orjson (several times faster than json.dumps with indent), with the dump format's NaN/Infinity tokens."""
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        handle.write(encode_dump_json(content))
