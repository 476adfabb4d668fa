"""Accumulates one step's entries, stacks and hierarchy and writes dump.json/stack.json/construct.json."""

from __future__ import annotations

import json
import os

import torch

from msprobe.report.atomic import atomic_path, write_text


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
        write_text(os.path.join(self.directory, "dump.json"), json.dumps(dump, indent=1))
        stack = {str(i): [names, list(lines)] for i, (lines, names) in enumerate(self.stacks.items())}
        write_text(os.path.join(self.directory, "stack.json"), json.dumps(stack, indent=1))
        construct = {} if self.level == "L1" else self.construct
        write_text(os.path.join(self.directory, "construct.json"), json.dumps(construct, indent=1))
