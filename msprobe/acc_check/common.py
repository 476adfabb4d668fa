"""What every acc_check backend shares, without importing a framework: status values, the per-output row, the
per-API result and its aggregation, and the precision-raise rule of the benchmark copy (spec §5.4)."""

from __future__ import annotations

from dataclasses import dataclass, field

from msprobe.dump.reader import SENTINELS
from msprobe.errors import MsprobeError

PASS, WARNING, ERROR, SKIP, BLANK = "pass", "warning", "error", "SKIP", " "

# PyTorch details columns after "Shape" and before "Status" (spec §5.8), in order.
METRICS = ["余弦相似度", "最大绝对误差", "双百指标", "双千指标", "双万指标", "二进制一致错误率", "误差均衡性",
           "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值", "inf/nan错误率", "相对误差错误率",
           "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比"]

# The benchmark copy of the inputs: float16/bfloat16 -> float32, float32 -> float64 (dtype names without prefix).
RAISE = {"float16": "float32", "bfloat16": "float32", "float32": "float64"}


def raise_target(dtype_names) -> str | None:
    """The dtype every raisable input of one call is raised to: the raise of its only raisable dtype, float32 when
    several are mixed (float16 + float32 in one call: the benchmark runs in float32), None when there is none."""
    present = {name for name in dtype_names if name in RAISE}
    if not present:
        return None
    if len(present) == 1:
        return RAISE[next(iter(present))]
    return "float32"


class InputError(MsprobeError):
    """An argument of a dumped API cannot be rebuilt (bad statistics, missing tensor file)."""


@dataclass
class OutputResult:
    """One details row: dtypes, shape, metric cells (None = blank), status and message."""

    bench_dtype: str
    device_dtype: str
    shape: str
    status: str
    message: str
    metrics: dict = field(default_factory=dict)


@dataclass
class ApiResult:
    """The outcome of one API: the status of each direction (`" "`/`""` for a direction without a record), the
    Message cell, one OutputResult per compared output, and the objects -save_error_data writes."""

    full_name: str
    forward_status: str
    backward_status: str
    message: str = ""
    forward: list = field(default_factory=list)    # OutputResult per forward output
    backward: list = field(default_factory=list)
    saved: dict = field(default_factory=dict)      # name -> object, for -save_error_data

    @property
    def skipped(self) -> bool:
        """Skipped: the forward direction was skipped, or there is no forward record and the backward was."""
        return self.forward_status == SKIP or (self.forward_status.strip() == "" and self.backward_status == SKIP)

    @property
    def failed(self) -> bool:
        return self.forward_status in (ERROR, WARNING) or self.backward_status in (ERROR, WARNING)


def skip_result(full_name: str, message: str) -> ApiResult:
    return ApiResult(full_name, SKIP, SKIP, message, [OutputResult(" ", " ", " ", SKIP, message)])


def aggregate(rows: list) -> str:
    """The status of a direction: error if any output is, else warning if any is, else pass (SKIP outputs do not
    count)."""
    statuses = {row.status for row in rows}
    if ERROR in statuses:
        return ERROR
    if WARNING in statuses:
        return WARNING
    return PASS


def first_line(exc: BaseException) -> str:
    """`Type: first line of the message` of an exception, for a SKIP message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


# Tensor leaves of a dump record, both frameworks.
TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter", "mindspore.Tensor",
                "mindspore.common.parameter.Parameter", "mindspore.Parameter")


def number(value):
    """A statistic or scalar as read by load_json: its NaN/Infinity sentinel strings become floats."""
    return SENTINELS.get(value, value) if isinstance(value, str) else value


def decode_numbers(node):
    """node with every NaN/Infinity sentinel string of the reader replaced by its float: outside the reader a NaN
    is a float (acc_check's messages and op_generate's extracted JSON and scripts never see the sentinels)."""
    if isinstance(node, str):
        return SENTINELS.get(node, node)
    if isinstance(node, list):
        return [decode_numbers(value) for value in node]
    if isinstance(node, dict):
        return {key: decode_numbers(value) for key, value in node.items()}
    return node


def is_tensor_item(item) -> bool:
    return isinstance(item, dict) and item.get("type") in TENSOR_TYPES


def data_names(node) -> list:
    """Every data_name (or datapath) of the tensor leaves below node, in traversal order."""
    found = []
    if isinstance(node, list):
        for element in node:
            found.extend(data_names(element))
    elif is_tensor_item(node):
        name = node.get("datapath") or node.get("data_name")
        if name:
            found.append(name)
    elif isinstance(node, dict) and "type" not in node:
        for value in node.values():
            found.extend(data_names(value))
    return found
