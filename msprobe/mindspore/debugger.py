"""PrecisionDebugger: the user-facing entry point of MindSpore data collection (PyNative mode). The life cycle is
msprobe.collect.debugger's; this module fills in MindSpore's hooks."""

from __future__ import annotations

import dataclasses
import os
import random

import mindspore as ms
import numpy as np
from mindspore import nn

from msprobe.collect.config import PYTORCH, load_config, read_config_file
from msprobe.collect.debugger import DebuggerBase, _InstanceOrClass
from msprobe.errors import MsprobeError
from msprobe.mindspore.cells import CellHooks
from msprobe.mindspore.collector import Collector
from msprobe.mindspore.graph_mode import GraphRoute
from msprobe.mindspore.jit import JitHooks
from msprobe.mindspore.primitives import PrimitiveHooks

# The reference's MindSpore config.json: its task sections may also hold `device` and `precision` (where
# statistics are computed: ours are always computed on the host in float64) and `tensor_list`.
MINDSPORE = dataclasses.replace(PYTORCH, framework="mindspore", section_ignored=("device", "precision",
                                                                                 "tensor_list"),
                                levels=(*PYTORCH.levels, "L2"))       # L2: msprobe.mindspore.kernel_dump


def seed_all(seed: int = 1234, mode: bool = False) -> None:
    """Seed Python, numpy and MindSpore; `mode=True` also asks MindSpore for deterministic kernels."""
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    ms.set_seed(seed)
    if mode:
        ms.set_context(deterministic="ON")


def _save_npy(array: np.ndarray, path: str) -> None:
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def _level(config_path, kwargs: dict):
    """The level a PrecisionDebugger(...) call asks for (the keyword wins over config.json)."""
    if kwargs.get("level") is not None:
        return kwargs["level"]
    return read_config_file(config_path).get("level") if config_path is not None else None


class PrecisionDebugger(DebuggerBase):
    """Dump statistics/tensors of APIs (L1), cells (L0) or both (mix) between start() and stop().

    debugger = PrecisionDebugger(config_path="config.json")   # or task=, level=, dump_path=, step=, ...
    for batch in data:
        with debugger.step_scope(model):      # or debugger.start(model) ... debugger.stop(); debugger.step()
            ...forward, backward, optimizer step...
    """

    framework = "mindspore"
    suffix = ".npy"

    def __new__(cls, config_path=None, **kwargs):
        # level L2 is MindSpore's own kernel dump, driven by msprobe.mindspore.kernel_dump.KernelDebugger
        if cls is PrecisionDebugger and _level(config_path, kwargs) == "L2":
            from msprobe.mindspore.kernel_dump import KernelDebugger

            model = kwargs.pop("model", None)
            debugger = KernelDebugger(load_config(config_path, spec=MINDSPORE, **kwargs), model)
            cls._newest = debugger          # PrecisionDebugger.start() and friends act on it
            return debugger
        return super().__new__(cls)

    def __init__(self, config_path=None, **kwargs):
        model = kwargs.pop("model", None)
        super().__init__(load_config(config_path, spec=MINDSPORE, **kwargs), model)
        col = self.collector = Collector(self.config, self.writer, self.errors)
        self.cells = CellHooks(col)
        self.primitives = PrimitiveHooks(col)
        self.jit = JitHooks(col)
        col.cells = self.cells
        col.suspendables = (self.cells, self.primitives)
        self.graph = GraphRoute(self)           # GRAPH_MODE cells and @ms.jit cells (graph_mode.py)

    @_InstanceOrClass
    def start(self, model=None) -> None:
        # GRAPH_MODE: the network compiles at its first call, recorded step or not, so the first start() taps it
        # (a start() that waits for its model under msprobe triage taps it when the triage starts it: collect/debugger)
        if not self._waits_for_model(model):
            self._quietly("start", lambda: self.graph.prepare(model))
        DebuggerBase.__dict__["start"].method(self, model)

    def _models(self, model) -> list:
        models = super()._models(model)
        # cells of a list of models are named Cell.<index>.<path>..., even of a list of one, as the reference
        self.cells.indexed = isinstance(model, (list, tuple))
        if self.config.level in ("L0", "mix") and not models:
            raise MsprobeError(f"level {self.config.level} dumps cells: pass the model to "
                               "PrecisionDebugger(...) or start(model)")
        if not all(isinstance(m, nn.Cell) for m in models):
            raise MsprobeError("start(model): model must be a mindspore.nn.Cell or a list of them")
        self.graph.check(models)            # GRAPH_MODE: what it can record (usage errors raise)
        return models

    def _rank(self):
        from mindspore.communication import GlobalComm, get_rank

        return get_rank() if GlobalComm.INITED else None

    def _install(self, models: list) -> None:
        if self.graph.install(models, self.cells.indexed):
            return
        col = self.collector
        level = self.config.level
        if level in ("L0", "mix"):
            self.cells.install(models)
            col.cells_active = True
            if self.cells.jit_cells and not self.graph.split:
                self.errors.once(("jit cells",), "%d cell(s) compiled with @ms.jit run as graphs (%s): they and "
                                 "their sub-cells have no Cell entries%s", len(self.cells.jit_cells),
                                 ", ".join(self.cells.jit_cells[:5]),
                                 "" if level == "L0" else "; each call is one Jit.<Class> entry")
        if level in ("L1", "mix"):
            col.install_api_hooks()             # first: the primitives' hooks find the wrappers of held APIs
            self.primitives.install(models)
        self.jit.install()          # at every level: a graph must compile without our hooks

    def _uninstall(self) -> None:
        self.graph.pause()
        col = self.collector
        col.cells_active = False
        col.uninstall_apis()
        self.cells.uninstall()
        self.primitives.uninstall()
        self.jit.uninstall()

    def _flush_pending(self) -> None:
        self.graph.flush()
        self.cells.flush()
        self.collector.settle_all()

    def _new_step(self) -> None:
        self.collector.reset_counters()
        self.cells.reset()
        self.primitives.reset()
        self.jit.reset()
        self.graph.reset()

    def _end(self, incomplete: str | None) -> None:
        if incomplete is None and self.running:
            incomplete = self._quietly("stop", self.graph.empty_reason)
        super()._end(incomplete)

    def _step_directory(self) -> str:
        return self.graph.directory(super()._step_directory())

    def _save(self, array, path: str) -> None:
        _save_npy(array, path)
