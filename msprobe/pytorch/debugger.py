"""PrecisionDebugger: the user-facing entry point of PyTorch data collection (the life cycle is
msprobe.collect.debugger's; this module fills in torch's hooks)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from msprobe.collect.config import load_config
from msprobe.collect.debugger import DebuggerBase
from msprobe.errors import MsprobeError
from msprobe.pytorch.hooks import Collector
from msprobe.pytorch.stats import saved_copy


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, numpy and torch; `mode=True` also asks torch for deterministic algorithms."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if mode:
        torch.use_deterministic_algorithms(True)


class PrecisionDebugger(DebuggerBase):
    """Dump statistics/tensors of APIs (L1), modules (L0) or both (mix) between start() and stop().

    debugger = PrecisionDebugger(config_path="config.json")   # or task=, level=, dump_path=, ...
    for batch in data:
        with debugger.step_scope(model):      # or debugger.start(model) ... debugger.stop(); debugger.step()
            ...forward, backward, optimizer step...
    """

    framework = "pytorch"
    suffix = ".pt"

    def __init__(self, config_path=None, **kwargs):
        model = kwargs.pop("model", None)
        super().__init__(load_config(config_path, **kwargs), model)
        self.collector = Collector(self.config, self.writer, self.errors)

    def _models(self, model) -> list:
        models = super()._models(model)
        if self.config.level in ("L0", "mix") and not models:
            raise MsprobeError(f"level {self.config.level} dumps modules: pass the model to "
                               "PrecisionDebugger(...) or start(model)")
        if not all(isinstance(m, torch.nn.Module) for m in models):
            raise MsprobeError("start(model): model must be a torch.nn.Module or a list of them")
        return models

    def _rank(self):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
        return None

    def _install(self, models: list) -> None:
        col = self.collector
        col.begin()
        col.guard_compiled(models)
        if self.config.level in ("L0", "mix"):
            col.install_module_hooks(models)
        if self.config.level in ("L1", "mix"):
            col.install_api_hooks(models)

    def _uninstall(self) -> None:
        self.collector.uninstall()

    def _flush_pending(self) -> None:
        self.collector.finish_modules()

    def _new_step(self) -> None:
        self.collector.reset_counters()

    def _tidy(self) -> None:
        self.collector.tidy_thread()

    def _save(self, tensor, path: str) -> None:
        torch.save(saved_copy(tensor), path)
