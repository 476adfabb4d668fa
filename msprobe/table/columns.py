"""Column names and order of the result table per mode (spec §4.2 + DECISIONS 7)."""

from __future__ import annotations

STATISTICS = "statistics"
TENSOR = "tensor"
MD5 = "md5"

BASIC = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
         "NPU Requires_grad", "Bench Requires_grad"]
STAT_DIFFS = ["Max diff", "Min diff", "Mean diff", "L2norm diff",
              "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"]
STAT_VALUES = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm"]
TENSOR_METRICS = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio"]
MD5_VALUES = ["NPU MD5", "BENCH MD5"]
VERDICT = ["Requires_grad Consistent", "Result", "Err_message"]
ERROR_ORIGIN = "Error_Origin"   # beyond the reference (issue 21): statistics and tensor modes, after Err_message
STACK = "NPU_Stack_Info"
DATA_NAME = "Data_name"


def columns_for(mode: str, with_stack: bool) -> list[str]:
    if mode == STATISTICS:
        columns = BASIC + STAT_DIFFS + STAT_VALUES + VERDICT + [ERROR_ORIGIN]
    elif mode == TENSOR:
        columns = BASIC + TENSOR_METRICS + STAT_VALUES + VERDICT + [ERROR_ORIGIN]
    elif mode == MD5:
        columns = BASIC + MD5_VALUES + VERDICT
    else:
        raise ValueError(mode)
    if with_stack:
        columns = columns + [STACK]
    if mode == TENSOR:
        columns = columns + [DATA_NAME]
    return columns


# Single columns that code reads or writes by name
NPU_NAME, BENCH_NAME = BASIC[0], BASIC[1]
NPU_MD5, BENCH_MD5 = MD5_VALUES
REQUIRES_GRAD_CONSISTENT, RESULT, ERR_MESSAGE = VERDICT


def table_mode(header) -> str | None:
    """The mode of a result table from its header (spec §5: a real-data table has Cosine and Data_name, a
    statistics one Max diff, an md5 one NPU MD5), None for any other table."""
    names = set(header)
    if "Cosine" in names and DATA_NAME in names:
        return TENSOR
    if "Max diff" in names:
        return STATISTICS
    if NPU_MD5 in names:
        return MD5
    return None

