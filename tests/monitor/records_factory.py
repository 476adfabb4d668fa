"""StepRecords made by hand for the monitor's tests: rows as dicts of the statistics, the rest filled in."""

from __future__ import annotations

import math

import numpy as np

from msprobe.monitor.records import OPS, STAGES, StepRecords

STAGE_OF = {"actv": "forward", "actv_grad": "backward", "grad_unreduced": "backward", "grad_reduced": "optimizer",
            "exp_avg": "optimizer", "exp_avg_sq": "optimizer", "param_origin": "optimizer",
            "param_updated": "optimizer", "loss": "step"}


def row(group: str, name: str, *, norm: float = 1.0, mean: float = 0.0, shape=(16,), present: bool = True,
        micro_step: int = 0, module: str | None = None, dtype: str = "torch.float32", **ops) -> dict:
    """One row; min/max default to what a tensor of that norm and shape plausibly has; other ops by keyword."""
    rms = norm / math.sqrt(math.prod(shape)) if shape else norm
    stats = {"min": mean - 2 * rms, "max": mean + 2 * rms, "mean": mean, "norm": norm, "zeros": 0.0, "nans": 0.0,
             "infs": 0.0}
    stats.update(ops)
    if module is None:
        module = name.rsplit(".", 1)[0] if "." in name else ""
    return {"group": group, "name": name, "module": module, "stage": STAGE_OF.get(group, "forward"),
            "micro_step": micro_step, "shape": tuple(shape) if present else None,
            "dtype": dtype if present else None, "present": present, "stats": stats}


def records(step: int, rows: list, rank: int = 0, ops: tuple = OPS) -> StepRecords:
    """The StepRecords of rows (dicts from `row`), in stage order then the given order; call = position."""
    rows = sorted(rows, key=lambda r: STAGES.index(r["stage"]))
    rec = StepRecords(rank=rank, step=step, ops=tuple(ops))
    for call, r in enumerate(rows):
        rec.group.append(r["group"])
        rec.name.append(r["name"])
        rec.module.append(r["module"])
        rec.stage.append(r["stage"])
        rec.micro_step.append(r["micro_step"])
        rec.call.append(call)
        rec.vpp_stage.append(0)
        rec.shape.append(r["shape"])
        rec.dtype.append(r["dtype"])
    rec.values = np.array([[r["stats"][op] if r["present"] else math.nan for op in ops] for r in rows],
                          dtype=np.float64).reshape(len(rows), len(ops))
    rec.present = np.array([r["present"] for r in rows], dtype=bool)
    return rec


def wobble(step: int, amplitude: float = 0.2, phase: float = 0.0) -> float:
    """A deterministic, irregular factor around 1 (no random generator: the same on every machine)."""
    return 1.0 + amplitude * math.sin(1.7 * step + phase) * math.cos(0.31 * step + 2 * phase)
