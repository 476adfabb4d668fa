"""PrecisionDebugger: the user-facing entry point of PyTorch data collection."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from msprobe.errors import MsprobeError
from msprobe.pytorch.config import load_config
from msprobe.pytorch.hooks import Collector


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, numpy and torch; `mode=True` also asks torch for deterministic algorithms."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if mode:
        torch.use_deterministic_algorithms(True)


def _rank():
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return None


class PrecisionDebugger:
    """Dump statistics/tensors of APIs (L1), modules (L0) or both (mix) between start() and stop().

    debugger = PrecisionDebugger(config_path="config.json")   # or task=, level=, dump_path=, ...
    for batch in data:
        debugger.start(model)
        ...forward, backward, optimizer step...
        debugger.stop()
        debugger.step()
    """

    def __init__(self, config_path: str | None = None, **kwargs):
        model = kwargs.pop("model", None)
        self.config = load_config(config_path, **kwargs)
        self.collector = Collector(self.config)
        self.current_step = 0
        self.model = model
        self._running = False
        self._directory_set = False

    def _step_directory(self) -> str:
        rank = _rank()
        leaf = f"rank{rank}" if rank is not None else f"proc{os.getpid()}"
        return os.path.join(self.config.dump_path, f"step{self.current_step}", leaf)

    def _enabled(self) -> bool:
        return self.config.wants_step(self.current_step) and self.config.wants_rank(_rank())

    def start(self, model=None) -> None:
        if self._running:
            return
        model = model if model is not None else self.model
        if not self._enabled():
            return
        models = [] if model is None else (list(model) if isinstance(model, (list, tuple)) else [model])
        if self.config.level in ("L0", "mix") and not models:
            raise MsprobeError(f"level {self.config.level} dumps modules: pass the model to "
                               "PrecisionDebugger(...) or start(model)")
        if not all(isinstance(m, torch.nn.Module) for m in models):
            raise MsprobeError("start(model): model must be a torch.nn.Module or a list of them")
        if not self._directory_set:
            self.collector.writer.reset(self._step_directory())
            self._directory_set = True
        self.collector.guard_compiled(models)
        if self.config.level in ("L0", "mix"):
            self.collector.install_module_hooks(models)
        if self.config.level in ("L1", "mix"):
            self.collector.install_api_hooks()
        self._running = True

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        self.collector.finish_modules()
        self.collector.uninstall()
        self.collector.writer.write()

    def step(self) -> None:
        self.stop()
        self.current_step += 1
        self.collector.reset_counters()
        self._directory_set = False
        self.collector.writer.directory = None
