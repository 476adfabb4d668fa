"""PrecisionDebugger: the user-facing entry point of MindSpore data collection (PyNative mode)."""

from __future__ import annotations

import os
import random

import mindspore as ms
import numpy as np
from mindspore import nn

from msprobe.errors import MsprobeError
from msprobe.mindspore._interim import load_config
from msprobe.mindspore.cells import CellHooks
from msprobe.mindspore.collector import Collector
from msprobe.mindspore.jit import JitHooks
from msprobe.mindspore.primitives import PrimitiveHooks


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, numpy and MindSpore; `mode=True` also asks MindSpore for deterministic kernels."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    ms.set_seed(seed)
    if mode:
        ms.set_context(deterministic="ON")


def _rank():
    try:
        from mindspore.communication import GlobalComm, get_rank
        if GlobalComm.INITED:
            return get_rank()
    except Exception:  # noqa: BLE001 - no communication module: a single process
        pass
    return None


class PrecisionDebugger:
    """Dump statistics/tensors of APIs (L1), cells (L0) or both (mix) between start() and stop().

    debugger = PrecisionDebugger(config_path="config.json")   # or task=, level=, dump_path=, step=
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
        self.cells = CellHooks(self.collector)
        self.primitives = PrimitiveHooks(self.collector)
        self.jit = JitHooks(self.collector)
        self.collector.cells = self.cells
        self.collector.suspendables = (self.cells, self.primitives)
        self.current_step = 0
        self.model = model
        self._running = False
        self._directory_set = False
        self._installed_models = None

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
            raise MsprobeError(f"level {self.config.level} dumps cells: pass the model to "
                               "PrecisionDebugger(...) or start(model)")
        if not all(isinstance(m, nn.Cell) for m in models):
            raise MsprobeError("start(model): model must be a mindspore.nn.Cell or a list of them")
        if not self._directory_set:
            self.collector.writer.reset(self._step_directory())
            self._directory_set = True
        col = self.collector
        if self.config.level in ("L0", "mix"):
            self.cells.install(models)
            col.cells_active = True
        if self.config.level in ("L1", "mix"):
            self.primitives.install(models)
            col.install_api_hooks()
        self.jit.install()
        if self.cells.jit_cells:
            col.log_once(("jit cells",), "msprobe dump: %d cell(s) compiled with @ms.jit (%s) run as graphs: "
                         "their sub-cells are not dumped", len(self.cells.jit_cells),
                         ", ".join(self.cells.jit_cells[:5]))
        self._running = True

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        col = self.collector
        col.cells_active = False
        self.cells.uninstall()
        self.primitives.uninstall()
        self.jit.uninstall()
        col.uninstall()
        col.writer.write()

    def step(self) -> None:
        self.stop()
        self.current_step += 1
        self.collector.reset_counters()
        self.cells.reset()
        self.primitives.reset()
        self.jit.reset()
        self._directory_set = False
        self.collector.writer.directory = None
