"""Per-output comparison of a device result against the CPU benchmark (spec acc_check.md §5.7, §6).

The status of an output comes from the cascade of §5.7 (cosine, max abs error, hundredth/thousandth/
ten-thousandth ratios); the precision standard chosen by the API name (DECISIONS 17, as documented for
1.2.1) decides which further metric columns are filled, and is named in the row's Message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from msprobe.acc_check.common import ERROR, METRICS, PASS, SKIP, WARNING, OutputResult  # noqa: F401 (re-exported)

ABSOLUTE, BINARY, ULP, THOUSANDTH, ACCUMULATIVE, BENCHMARK = (
    "absolute_threshold", "binary_consistency", "ulp_compare", "thousandth_threshold",
    "accumulative_error_compare", "benchmark")
STANDARD_NAMES = {ABSOLUTE: "绝对阈值法", BINARY: "二进制一致法", ULP: "ULP误差比对法", THOUSANDTH: "双千指标法",
                  ACCUMULATIVE: "累积误差比对法", BENCHMARK: "标杆比对法"}
STANDARD_APIS = {
    ABSOLUTE: """mul mul_ __mul__ __imul__ __rmul__ add add_ __add__ __iadd__ __radd__ div div_ __div__ __idiv__
        divide divide_ leaky_relu leaky_relu_ prelu reciprocal reciprocal_ rsqrt rsqrt_ square square_ sub sub_
        rsub __isub__ __sub__""",
    BINARY: """abs abs_ absolute absolute_ argmin bitwise_and bitwise_and_ broadcast_to ceil ceil_ equal fill_
        flatten floor floor_ gather greater greater_ greater_equal greater_equal_ histc isfinite isnan less less_
        less_equal less_equal_ logical_and logical_and_ logical_not logical_not_ logical_or logical_or_ masked_fill
        masked_fill_ max_pool3d maximum minimum neg neg_ nonzero not_equal not_equal_ one_hot pad relu reshape
        round round_ select sign sign_ sort tile topk transpose transpose_ tril tril_ triu triu_ type_as""",
    ULP: """__matmul__ addbmm addbmm_ addmm addmm_ baddbmm baddbmm_ bilinear bmm chain_matmul hspmm linear matmul
        mm mv smm sspaddmm""",
    THOUSANDTH: "conv1d conv2d",
    ACCUMULATIVE: "test_api",
}
API_STANDARD = {name: standard for standard, names in STANDARD_APIS.items() for name in names.split()}


def standard_of(api_name: str) -> str:
    return API_STANDARD.get(api_name, BENCHMARK)


@dataclass(frozen=True)
class DtypeConfig:
    small_value: float
    small_atol_abs: float
    small_atol_bench: float
    rtol: float
    accumulative_bound: float
    min_exp: int
    mantissa: int
    ulp_threshold: float


CONFIGS = {
    torch.float16: DtypeConfig(2 ** -10, 2 ** -16, 1e-16, 2 ** -10, 2 ** -8, -14, 10, 1),
    torch.bfloat16: DtypeConfig(2 ** -10, 1e-16, 1e-16, 2 ** -8, 2 ** -7, -126, 7, 1),
    torch.float32: DtypeConfig(2 ** -20, 2 ** -30, 2 ** -30, 2 ** -20, 2 ** -11, -126, 23, 32),
}
NEW_STANDARD_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BF16_FINITE_MAX = 3.3895313892515355e38

MSG_COSINE = "Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n"
MSG_MAX_ABS = "Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
MSG_HUNDREDTH = "Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n"
MSG_LOW_PASS = "Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n"
MSG_LOW_WARNING = "Relative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n"
MSG_THOUSANDTH = "Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n"
MSG_TEN_THOUSANDTH = "Relative error is greater than 0.0001, consider as warning, skip other check and set to SPACE.\n"
MSG_PASS = "Relative error is less than 0.0001, consider as pass.\n"


def compare_output(bench, device, api_name: str, full_name: str) -> list:
    """Compare one (possibly nested) API output; returns one OutputResult per compared element."""
    if bench is None:
        return [OutputResult(" ", " ", " ", SKIP, "Bench output is None, skip this test.")]
    if isinstance(bench, (list, tuple)):
        if not isinstance(device, (list, tuple)):
            return [_error(bench, device, "bench and npu output type is different.")]
        if len(bench) > len(device):
            return [_error(bench, device, "bench and npu output structure is different.")]
        results = []
        for b, d in zip(bench, device):
            results.extend(compare_output(b, d, api_name, full_name))
        return results
    if isinstance(bench, dict):
        if not isinstance(device, dict):
            return [_error(bench, device, "bench and npu output type is different.")]
        if set(bench) != set(device):
            return [_error(bench, device, "bench and npu output dict keys are different.")]
        results = []
        for key in bench:
            results.extend(compare_output(bench[key], device[key], api_name, full_name))
        return results
    if isinstance(bench, torch.Tensor):
        if not isinstance(device, torch.Tensor):
            return [_error(bench, device, "bench and npu output type is different.")]
        return [compare_tensor(bench, device, api_name, full_name)]
    if isinstance(bench, (bool, int, float, str)):
        if type(bench) is not type(device):
            return [_error(bench, device, "bench and npu output type is different.")]
        same = bench == device or (isinstance(bench, float) and math.isnan(bench) and math.isnan(device))
        return [OutputResult(str(type(bench)), str(type(device)), "[]", PASS if same else ERROR,
                             "" if same else f"bench output {bench!r} differs from npu output {device!r}.",
                             {"二进制一致错误率": 0.0 if same else 1.0})]
    return [_error(bench, device, f"Unexpected output type in compare_core: {type(bench).__name__}.")]


def _error(bench, device, message: str) -> OutputResult:
    return OutputResult(_dtype_text(bench), _dtype_text(device), " ", ERROR, message)


def _dtype_text(value) -> str:
    return str(value.dtype) if isinstance(value, torch.Tensor) else str(type(value))


def _family(dtype) -> str:
    if dtype.is_floating_point:
        return "float"
    if dtype.is_complex:
        return "complex"
    if dtype in (torch.bool, torch.uint8):
        return "bool"
    return "int"


def compare_tensor(bench: torch.Tensor, device: torch.Tensor, api_name: str, full_name: str) -> OutputResult:
    device_dtype = device.dtype
    row = OutputResult(str(bench.dtype), str(device_dtype), str(tuple(device.shape)), PASS, "")
    bench = bench.detach().cpu()
    device = device.detach().cpu()
    if device_dtype == torch.bfloat16:
        bench, device = bench.float(), device.float()
    if bench.shape != device.shape:
        row.status, row.message = ERROR, f"The shape of bench{tuple(bench.shape)} and npu{tuple(device.shape)} not equal."
        return row
    if _family(bench.dtype) != _family(device.dtype):
        row.status = ERROR
        row.message = f"Bench out dtype is {row.bench_dtype} but npu output dtype is {row.device_dtype}, cannot compare."
        return row
    if device.numel() == 0:
        row.status, row.message = SKIP, "There is not bench calculation result."
        return row
    if "dropout" in full_name:
        return _dropout(bench, device, row)
    if _family(device.dtype) != "float":
        b, d = bench.numpy(), device.numpy()
        rate = float(np.count_nonzero(b != d)) / b.size
        row.metrics["二进制一致错误率"] = rate
        row.status = PASS if rate == 0 else ERROR
        row.message = f"Current {device_dtype} data, only perform binary comparison.\n"
        return row
    b = bench.numpy()
    d = device.numpy()
    b64 = b.astype(np.float64)
    d64 = d.astype(np.float64)
    eps = 2.0 ** -8 if device_dtype == torch.bfloat16 else float(np.finfo(b.dtype).eps)
    with np.errstate(all="ignore"):
        equal = (b64 == d64) | (np.isnan(b64) & np.isnan(d64))
        abs_err = np.where(equal, 0.0, np.abs(d64 - b64))
        rel_origin = np.abs(abs_err / (np.abs(b64) + eps))
    prefix = ""
    standard = standard_of(api_name)
    if device_dtype in NEW_STANDARD_DTYPES:
        row.metrics.update(standard_metrics(standard, b64, d64, abs_err, eps, device_dtype, rel_origin))
    else:
        prefix = f"The data type {device_dtype} is not supported for new precision standard.\n"
    cosine, cosine_ok, cosine_note = _cosine(b64, d64)
    row.metrics["余弦相似度"] = cosine
    status, step = _cascade(row.metrics, cosine_ok, abs_err, rel_origin, device_dtype)
    row.status = status
    row.message = (f"{prefix}{cosine_note}\n{step}Precision standard: {STANDARD_NAMES[standard]} ({standard})."
                   if cosine_note or step else prefix)
    return row


def _cascade(metrics: dict, cosine_ok: bool, abs_err, rel_origin, device_dtype) -> tuple:
    if not cosine_ok:
        return ERROR, MSG_COSINE
    max_abs = float(np.max(abs_err))   # NaN when a NaN/inf element differs: never below 0.001
    metrics["最大绝对误差"] = max_abs
    if max_abs < 0.001:
        return PASS, MSG_MAX_ABS
    def share_below(bound: float) -> float:
        return float(np.count_nonzero(rel_origin < bound)) / rel_origin.size

    if device_dtype in (torch.float16, torch.bfloat16):
        hundredth = metrics["双百指标"] = share_below(0.01)
        if hundredth <= 0.99:
            return ERROR, MSG_HUNDREDTH
        thousandth = metrics["双千指标"] = share_below(0.001)
        return (PASS, MSG_LOW_PASS) if thousandth > 0.999 else (WARNING, MSG_LOW_WARNING)
    thousandth = metrics["双千指标"] = share_below(0.001)
    if thousandth <= 0.999:
        return ERROR, MSG_THOUSANDTH
    ten_thousandth = metrics["双万指标"] = share_below(0.0001)
    if ten_thousandth <= 0.9999:
        return WARNING, MSG_TEN_THOUSANDTH
    return PASS, MSG_PASS


def _cosine(b, d) -> tuple:
    """(value or ' ', ok, note) as in the reference: each side scaled by its max |x| first."""
    b = b.reshape(-1)
    d = d.reshape(-1)
    if b.size == 1:
        return " ", True, "All the data in device dump data is scalar. Please refer to other compare algorithms."
    tiny = float(np.finfo(np.float32).eps)
    with np.errstate(all="ignore"):
        b_max = float(np.max(np.abs(b)))
        d_max = float(np.max(np.abs(d)))
        if b_max <= tiny and d_max <= tiny:
            return " ", True, "All the data in device and bench outputs are zero."
        if d_max <= tiny:
            return " ", False, "All the data is zero in device dump data."
        if b_max <= tiny:
            return " ", False, "All the data is zero in bench dump data."
        bn, dn = b / b_max, d / d_max
        value = float(np.dot(bn, dn) / (np.linalg.norm(bn) * np.linalg.norm(dn)))
    if math.isnan(value):
        return math.nan, True, "Dump data has NaN when comparing with Cosine Similarity."
    value = min(1.0, max(-1.0, value))
    return value, value > 0.99, ""


def _dropout(bench, device, row: OutputResult) -> OutputResult:
    n = device.numel()
    if n >= 100:
        zeros = abs(int((bench == 0).sum()) - int((device == 0).sum())) / n
        row.status = PASS if zeros < 0.1 else ERROR
    row.message = "dropout: compared by the share of zeros."
    row.metrics["dropout"] = True
    return row


def _to_device_dtype(array, dtype):
    """The benchmark rounded to the device dtype (as float64 numbers)."""
    return torch.from_numpy(array).to(dtype).double().numpy()


def standard_metrics(standard: str, b, d, abs_err, eps: float, dtype, rel_origin) -> dict:
    """The metric columns of one precision standard (spec §6.3); b and d are float64 arrays."""
    config = CONFIGS[dtype]
    size = b.size
    if standard == THOUSANDTH:
        return {"双千指标": float(np.count_nonzero(rel_origin < 0.001)) / size}
    if standard == BINARY:
        unequal = ~((b == d) | (np.isnan(b) & np.isnan(d)))
        return {"二进制一致错误率": float(np.count_nonzero(unequal)) / size}
    b_cast = _to_device_dtype(b, dtype)
    both_finite = np.isfinite(d) & np.isfinite(b_cast)
    inf_nan = ~both_finite
    small_value = 1.0 if standard == ACCUMULATIVE else config.small_value
    small = (np.abs(b) <= small_value) & both_finite
    normal = both_finite & ~small
    with np.errstate(all="ignore"):
        rel = abs_err / (np.abs(b) + eps)
    if standard == ULP:
        return _ulp(b, d, dtype, config)
    if standard in (ABSOLUTE, ACCUMULATIVE):
        rtol = config.accumulative_bound if standard == ACCUMULATIVE else config.rtol
        atol = config.accumulative_bound if standard == ACCUMULATIVE else config.small_atol_abs
        result = {"inf/nan错误率": _inf_nan_ratio(b, b_cast, d, inf_nan, dtype, eps, rtol),
                  "相对误差错误率": _ratio(normal & (rel > rtol), normal),
                  "绝对误差错误率": _ratio(small & (abs_err > atol), small)}
        if standard == ACCUMULATIVE:
            result["误差均衡性"] = _balance(b_cast, d)
        return result
    # benchmark
    rel_prime = np.where(small | inf_nan, -1.0, rel)
    valid = rel_prime[rel_prime >= 0]
    masked = np.where(small | inf_nan, 0.0, abs_err)
    m = int(np.count_nonzero(small | inf_nan))
    with np.errstate(all="ignore"):
        mse = float(np.mean(masked ** 2)) * (size / (size - m + 1e-4) + 1e-4)
    return {"小值域错误占比": _ratio(small & (abs_err > config.small_atol_bench), small),
            "相对误差最大值": max(float(np.max(rel_prime)), 0.0),
            "相对误差平均值": float(np.mean(valid)) if valid.size else 0.0,
            "均方根误差": math.sqrt(mse),
            "误差均衡性": _balance(b_cast, d)}


def _ratio(hits, population) -> float:
    count = int(np.count_nonzero(population))
    return float(np.count_nonzero(hits)) / count if count else 0.0


def _balance(b_cast, d) -> float:
    return abs(int(np.count_nonzero(d > b_cast)) - int(np.count_nonzero(d < b_cast))) / d.size


def _inf_nan_ratio(b, b_cast, d, inf_nan, dtype, eps, rtol) -> float:
    count = int(np.count_nonzero(inf_nan))
    if not count:
        return 0.0
    limit = BF16_FINITE_MAX if dtype == torch.bfloat16 else float(torch.finfo(dtype).max)
    dc = np.clip(d[inf_nan], -limit, limit)
    bc = np.clip(b_cast[inf_nan], -limit, limit)
    with np.errstate(all="ignore"):
        ok = (np.abs(dc - bc) / (np.abs(b[inf_nan]) + eps) <= rtol) | (np.isnan(dc) & np.isnan(bc))
    return float(count - int(np.count_nonzero(ok))) / count


def _ulp(b, d, dtype, config: DtypeConfig) -> dict:
    work = np.float64 if dtype == torch.float32 else np.float32
    with np.errstate(all="ignore"):
        magnitude = np.abs(b)
        eb = np.where(magnitude == 0, 0.0, np.floor(np.log2(np.where(magnitude == 0, 1.0, magnitude))))
        eb = np.maximum(eb, config.min_exp)
        ulp = np.abs((d - b).astype(work) * np.exp2((-eb + config.mantissa).astype(work)))
    return {"ULP误差最大值": float(np.max(ulp)),
            "ULP误差平均值": float(np.mean(ulp)),
            "ULP误差大于阈值占比": float(np.count_nonzero(ulp > config.ulp_threshold)) / ulp.size}
