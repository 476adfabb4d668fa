"""The plain data every part of the monitor exchanges: one rank's metrics of one step (`StepRecords`, produced by the
framework adapters, read by the CSV/TensorBoard writers, the anomaly rules and the golden watch) and the anomalies
found in them (`Anomaly`, read by the anomaly file, `analyse` and `report`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Every statistic the monitor can take of a tensor, in the order of the CSV columns (a config's `ops` picks a subset,
# kept in this order). `zeros` and `nans` are fractions / counts as the reference writes them; `infs` is ours.
OPS = ("min", "max", "mean", "norm", "zeros", "nans", "infs")

# The stage a group belongs to, in the order the stages happen within a step (the anomaly order's third key).
STAGES = ("forward", "backward", "optimizer", "step")


@dataclass
class StepRecords:
    """One rank's metrics of one step (every micro-step), one row per (group, name, micro-step), in the order they
    were taken. Per-row lists are parallel; `values` holds one column per op of `ops`."""

    rank: int
    step: int
    ops: tuple                       # the statistics of `values`' columns, a subset of OPS in OPS order
    group: list = field(default_factory=list)       # the CSV file's prefix: actv, actv_grad, grad_unreduced, ...
    name: list = field(default_factory=list)        # the CSV's name column ("layers.0.fc1.output", "fc1.weight")
    module: list = field(default_factory=list)      # the module or parameter the row is about ("layers.0.fc1")
    stage: list = field(default_factory=list)       # one of STAGES
    micro_step: list = field(default_factory=list)  # int
    call: list = field(default_factory=list)        # int: order of the taking within the step (forward calls,
                                                    # then backward calls as autograd ran them, then the optimizer)
    vpp_stage: list = field(default_factory=list)   # int (the model chunk; 0 without virtual pipeline stages)
    shape: list = field(default_factory=list)       # tuple of ints, or None where no tensor was present
    dtype: list = field(default_factory=list)       # the framework's spelling ("torch.bfloat16"), or None
    values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # float64 [rows, len(ops)]
    present: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # False: no tensor in that slot
                                                    # (an input that needs no gradient): its values are NaN and it
                                                    # is never read as a NaN of the training

    def __len__(self) -> int:
        return len(self.name)


@dataclass(frozen=True)
class Anomaly:
    """One anomaly: where (rank, step, micro-step, stage, call order, module), what (metric = group.op) and how far
    from what was expected (value against baseline: the robust recent baseline, or the golden's value)."""

    kind: str           # "nan" | "inf" | "spike" | "drop" | "divergence"
    rank: int
    step: int
    micro_step: int
    stage: str          # one of STAGES
    call: int
    module: str
    name: str           # the row's CSV name
    group: str
    op: str
    value: float
    baseline: float | None
    rule: str           # the rule that found it: AnomalyNan, AnomalyTurbulence, LossSpike, GoldenDivergence, ...
    message: str = ""

    @property
    def metric(self) -> str:
        return f"{self.group}.{self.op}"

    def order_key(self) -> tuple:
        """The order of `analyse`: step, micro-step, stage, call order (then rank, for equal places)."""
        return (self.step, self.micro_step, STAGES.index(self.stage) if self.stage in STAGES else len(STAGES),
                self.call, self.rank)
