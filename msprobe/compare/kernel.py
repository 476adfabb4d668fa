"""Kernel compare: MindSpore static-graph (kernel-by-kernel) dumps of .npy files or statistic.csv, paired by
op name, task, input/output slot and call order (spec §2.11, §3.11, §4.10)."""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from io import StringIO

import numpy as np

from msprobe.compare.pipeline import write_table
from msprobe.compare.tensor_metrics import compare_arrays
from msprobe.errors import MsprobeError
from msprobe.log import get_logger
from msprobe.names import counter
from msprobe.scale.stamp import timestamp
from msprobe.scale.task import JobFailure
from msprobe.table.cells import NA
from msprobe.table.model import ResultTable
from msprobe.table.readers import read_csv_text
from msprobe.table.xlsx_writer import ACCURACY_FILLS

NPY_COLUMNS = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
               "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
               "Bench l2norm", "Accuracy Reached or Not", "Err_message", "Cosine", "EucDist", "MaxAbsErr",
               "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"]
STAT_COLUMNS = NPY_COLUMNS[:16] + ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr",
                                   "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU CSV File",
                                   "Bench CSV File"]
ACCURACY = "Accuracy Reached or Not"
MSG_NOT_ARRAY = "Dump file is not ndarray.\n"
MSG_EMPTY = "This is empty data, can not compare.\n"
MSG_SCALAR = "This is type of scalar data, can not compare.\n"
# the reference's texts, which scripts grep for: "Tensor" capitalised, "Skipped." after the dtype text only
MSG_SHAPE = "Shape of NPU and bench Tensor do not match.\n"
MSG_DTYPE = "Dtype of NPU and bench Tensor do not match. Skipped.\n"
MSG_NAN = "The position of inf or nan in NPU and bench Tensor do not match.\n"
MSG_MISSING = "Dump file not found.\n"
MSG_STAT_SHAPE = "Tensor shapes do not match.\n"
MSG_NAN_NPU = "The NPU tensor holds NaN.\n"
MSG_NAN_BENCH = "The bench tensor holds NaN.\n"
MSG_HALF_AS_FLOAT32 = ("{side} file holds float32 data under its float16 header (MindSpore's CPU dump of a float16 "
                       "op run in float32): its values are read as float32.\n")


@dataclass(frozen=True)
class KernelItem:
    """One tensor of one kernel call: a .npy file or a statistic.csv row."""

    key: str          # op_name.task_id.{input|output}.slot
    sort_key: tuple
    timestamp: int
    name: str         # file path (npy) or the key (statistic)
    stats: tuple = ()  # statistic mode: (dtype, shape, max, min, mean, norm)
    csv_file: str = ""


@dataclass
class DataDir:
    mode: str                                  # "npy" | "statistic"
    items: list = field(default_factory=list)


def parse_kernel_name(name: str):
    """(op_type, op_name, task_id, stream_id, timestamp, io, slot) from a kernel .npy name, or None."""
    if not name.endswith(".npy"):
        return None
    parts = name[:-4].split(".")
    io_positions = [i for i, part in enumerate(parts) if part in ("input", "output")]
    if not io_positions:
        return None
    io = io_positions[-1]
    if io < 5 or io + 1 >= len(parts) or counter(parts[io + 1]) is None:
        return None
    op_type, op_name, task_id, stream_id, timestamp = parts[0], parts[1], parts[2], parts[3], parts[4]
    if counter(task_id) is None or counter(stream_id) is None or counter(timestamp) is None:
        return None
    return op_type, op_name, task_id, stream_id, counter(timestamp), parts[io], counter(parts[io + 1])


# the header MindSpore's (and numpy's) .npy writer gives a C-ordered array: read without numpy's literal_eval,
# which costs more than the statistics of a small tensor; anything else goes through np.load
_NPY_HEADER = re.compile(r"\{'descr': '([<>|=][a-z]\d+)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \}\s*")
_HALF = np.dtype("<f2")


def _read_npy(path: str) -> tuple[np.ndarray, bytes | None, int]:
    """The array np.load(path) gives, and for a plain C-ordered file its bytes and where its data part starts."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:6] == b"\x93NUMPY" and data[6] in (1, 2) and len(data) >= 12:
        start = 10 if data[6] == 1 else 12
        end = start + int.from_bytes(data[8:start], "little")
        found = _NPY_HEADER.fullmatch(data[start:end].decode("latin-1"))
        if found:
            shape = tuple(int(part) for part in found.group(2).split(",") if part.strip())
            dtype = np.dtype(found.group(1))
            count = math.prod(shape)
            if len(data) - end >= count * dtype.itemsize:
                return np.frombuffer(data, dtype, count=count, offset=end).reshape(shape), data, end
    return np.load(path, allow_pickle=False), None, 0


def read_npy(path: str) -> np.ndarray:
    """np.load(path) of a version 1 or 2 .npy file, faster for the plain C-ordered arrays MindSpore writes. Like
    np.load it reads the first elements of a longer data part (MindSpore saves a view with its whole storage)."""
    return _read_npy(path)[0]


def kernel_values(path: str) -> tuple[np.ndarray, bool]:
    """The values of one kernel file, and whether they are float32 data found under a float16 header. MindSpore's
    CPU dump writes a float16 op that its CPU kernel runs in float32 (MatMul, BiasAdd, ... of a float16 cell) as
    the float32 result under the graph's float16 type: the data part holds exactly twice the bytes the header
    declares, and read as float16 they are garbage (NaN, 27360 where the op's values are below 1)."""
    array, data, end = _read_npy(path)
    if data is not None and array.dtype == _HALF and array.size and len(data) - end == 2 * array.nbytes:
        return np.frombuffer(data, "<f4", count=array.size, offset=end).reshape(array.shape), True
    return array, False


def _counter_or(text: str, default: int) -> int:
    number = counter(text)
    return default if number is None else number


def rank_step_of(directory: str) -> tuple[int, int]:
    """Rank and step of a lowest-level data directory (spec §2.11); -1 when not derivable."""
    parts = os.path.normpath(directory).split(os.sep)
    if len(parts) < 4:
        return -1, -1

    if "rank_" in directory:
        rank = _counter_or(parts[-4].rsplit("_", 1)[-1], -1)
    else:
        rank = _counter_or(parts[-4], -1)
        if rank < 0:
            rank = _counter_or(parts[-3], -1)
    return rank, _counter_or(parts[-1], -1)


def scan(root: str) -> dict:
    """(rank, step) -> list of data directories (lowest-level directories of the tree)."""
    found: dict = {}
    for directory, subdirs, _files in os.walk(root, followlinks=False):
        subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(directory, d))]
        if subdirs:
            continue
        rank, step = rank_step_of(directory)
        if rank >= 0 and step >= 0:
            found.setdefault((rank, step), []).append(directory)
    return found


def is_kernel_dump(root: str) -> bool:
    """True for a directory laid out as a kernel dump: a data directory of .npy files or a statistic.csv at a
    rank/step place (rank_0/Net/0/0)."""
    if not os.path.isdir(root):
        return False
    for directories in scan(root).values():
        for directory in directories:
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            if "statistic.csv" in names or any(name.endswith(".npy") for name in names):
                return True
    return False


def read_data_dir(directory: str) -> DataDir | None:
    names = os.listdir(directory)
    mapping = {}
    if "mapping.csv" in names:
        for row in csv.reader(StringIO(read_csv_text(os.path.join(directory, "mapping.csv")))):
            if len(row) >= 2:
                mapping[row[0]] = row[1]
    npys = [n for n in names if n.endswith(".npy")]
    if npys:
        items = []
        for name in npys:
            parsed = parse_kernel_name(mapping.get(name, name))
            if parsed is None:
                continue
            _, op_name, task_id, _, timestamp, io, slot = parsed
            items.append(KernelItem(f"{op_name}.{task_id}.{io}.{slot}", (op_name, int(task_id), io, slot), timestamp,
                                    os.path.join(directory, name)))
        return DataDir("npy", items)
    if "statistic.csv" in names:
        return DataDir("statistic", read_statistic_csv(os.path.join(directory, "statistic.csv")))
    return None


def _stat_value(text: str) -> float:
    text = text.strip()
    if text in ("null", "False", ""):
        return 0.0
    if text == "True":
        return 1.0
    try:
        return float(np.float32(float(text)))
    except ValueError:
        return math.nan


def read_statistic_csv(path: str) -> list:
    logger = get_logger()
    rows = list(csv.reader(StringIO(read_csv_text(path))))
    if not rows:
        return []
    header = rows[0]
    positions = {}
    for column in ("Data Type", "Shape", "Max Value", "Min Value", "Avg Value", "L2Norm Value"):
        if column in header:
            positions[column] = header.index(column)
        else:
            logger.warning("%s has no column %r; its values are NaN.", path, column)
    items = []
    for row in rows[1:]:
        if len(row) < 13:
            raise MsprobeError(f"{path} has been modified into incorrect format: a row has {len(row)} fields.")
        op_name, task_id, timestamp, io, slot = row[1], row[2], row[4], row[5], row[6]

        def value(column, row=row):
            return _stat_value(row[positions[column]]) if column in positions else math.nan
        dtype = row[positions["Data Type"]] if "Data Type" in positions else ""
        shape = row[positions["Shape"]].replace("(", "[").replace(")", "]") if "Shape" in positions else ""
        stats = (dtype, shape, value("Max Value"), value("Min Value"), value("Avg Value"), value("L2Norm Value"))
        items.append(KernelItem(f"{op_name}.{task_id}.{io}.{slot}",
                                (op_name, _counter_or(task_id, -1), io, _counter_or(slot, -1)),
                                _counter_or(timestamp, 0), f"{op_name}.{task_id}.{io}.{slot}",
                                stats, path))
    return items


def numbered(items: list) -> dict:
    """(key, n) -> item, n = call order of the key by ascending timestamp."""
    by_key: dict = {}
    for item in items:
        by_key.setdefault(item.key, []).append(item)
    out = {}
    for key, group in by_key.items():
        for number, item in enumerate(sorted(group, key=lambda i: i.timestamp)):
            out[(key, number)] = item
    return out


def _when(item: KernelItem) -> tuple:
    """When a tensor was dumped: its timestamp (MindSpore stamps each file as it writes it, a kernel's inputs and
    then its outputs), on a tie inputs before outputs, then the slot."""
    return item.timestamp, item.sort_key[2], item.sort_key[3], item.key


def execution_order(target: dict, golden: dict) -> list:
    """The (key, n) of both sides in the target's execution order; a tensor only the golden has comes right after
    the golden's previous tensor that both have (first, when none precedes it)."""
    after: dict = {}
    previous = None
    for key in sorted(golden, key=lambda k: _when(golden[k])):
        if key in target:
            previous = key
        else:
            after.setdefault(previous, []).append(key)
    keys = list(after.get(None, ()))
    for key in sorted(target, key=lambda k: _when(target[k])):
        keys.append(key)
        keys.extend(after.get(key, ()))
    return keys


def accuracy(cosine, max_abs) -> str:
    """Accuracy Reached or Not from Cosine and MaxAbsErr (spec §4.9.2)."""
    if cosine == "shape unmatched":
        return "Unmatched"
    if cosine is None or max_abs is None:
        return "None"
    if NA in (cosine, max_abs):
        return "No"
    try:
        c, m = float(cosine), float(max_abs)
    except (TypeError, ValueError):
        return "None"
    if c < 0.99 and m > 0.001:
        return "No"
    if c < 0.9 or m > 1:
        return "No"
    return "Yes"


def shape_text(shape: tuple) -> str:
    return str(shape).replace("(", "[").replace(")", "]")


def npy_stats(array: np.ndarray, dtype: str | None = None) -> tuple:
    """Dtype (`dtype`, else the array's), shape, max, min, mean and L2 norm of one kernel tensor."""
    dtype = dtype or str(array.dtype)
    if array.size == 0:
        return dtype, shape_text(array.shape), None, None, None, None
    return (dtype, shape_text(array.shape), str(array.max()), str(array.min()),
            float(np.mean(array)), float(np.linalg.norm(array)))


def _load(path: str) -> tuple[np.ndarray | None, bool]:
    """The values of a kernel file (None when it holds no bool/int/float array) and whether they are float32 data
    found under a float16 header (kernel_values)."""
    try:
        array, half = kernel_values(path)
    except (ValueError, OSError, EOFError):
        return None, False
    return (array, half) if isinstance(array, np.ndarray) and array.dtype.kind in "biuf" else (None, False)


def _holds_nan(array: np.ndarray, stats: tuple) -> bool:
    """Whether a float tensor holds NaN (its max is NaN then)."""
    return array.dtype.kind == "f" and stats[2] == "nan"


NO_STATS = ("", "", None, None, None, None)


def _row_start(target: KernelItem | None, golden: KernelItem | None, t_stats: tuple, g_stats: tuple) -> list:
    """Names, dtypes, shapes and the eight statistics: the first 14 columns of both modes."""
    return [target.name if target else "", golden.name if golden else "", t_stats[0], g_stats[0], t_stats[1],
            g_stats[1], *t_stats[2:], *g_stats[2:]]


def compare_npy_pair(target: KernelItem | None, golden: KernelItem | None) -> list:
    """One npy-mode row in NPY_COLUMNS order. A float16 file holding float32 data (kernel_values) keeps its float16
    dtype in the row and is measured by its float32 values, said in Err_message; a tensor holding NaN is never
    "Yes" (its other elements may agree: the NaN is said and the row is "No")."""
    t_array, t_half = _load(target.name) if target else (None, False)
    g_array, g_half = _load(golden.name) if golden else (None, False)
    t_stats = npy_stats(t_array, "float16" if t_half else None) if t_array is not None else NO_STATS
    g_stats = npy_stats(g_array, "float16" if g_half else None) if g_array is not None else NO_STATS
    row = _row_start(target, golden, t_stats, g_stats)
    metrics = [""] * 6
    verdict = ""
    read_as = MSG_HALF_AS_FLOAT32.format(side="NPU") * t_half + MSG_HALF_AS_FLOAT32.format(side="Bench") * g_half
    if target is None or golden is None:
        message = MSG_MISSING
    elif t_array is None or g_array is None:
        message = MSG_NOT_ARRAY
    elif t_array.size == 0 or g_array.size == 0:
        message = MSG_EMPTY
    elif t_array.ndim == 0 or g_array.ndim == 0 or t_array.shape != g_array.shape or t_stats[0] != g_stats[0]:
        # every problem of the pair is named, in the reference's order
        message = (MSG_SCALAR * (t_array.ndim == 0 or g_array.ndim == 0) + MSG_SHAPE * (t_array.shape != g_array.shape)
                   + MSG_DTYPE * (t_stats[0] != g_stats[0]))
    else:
        result = compare_arrays(t_array, g_array, squeeze=False)
        if result.problem == "nan_position":
            message = MSG_NAN
        else:
            metrics = list(result.cells)
            nan = MSG_NAN_NPU * _holds_nan(t_array, t_stats) + MSG_NAN_BENCH * _holds_nan(g_array, g_stats)
            message = nan + "".join(result.notes)
            verdict = "No" if nan else accuracy(metrics[0], metrics[2])
    return row + [verdict, message + read_as] + metrics


def compare_stat_pair(target: KernelItem | None, golden: KernelItem | None) -> list:
    """One statistic-mode row in STAT_COLUMNS order. A row whose target or golden statistics hold NaN is "No", with
    the reason (the reference reads two NaN maxima as "Yes")."""
    t_stats = target.stats if target else NO_STATS
    g_stats = golden.stats if golden else NO_STATS
    row = _row_start(target, golden, t_stats, g_stats)
    diffs = [""] * 8
    verdict = ""
    if target is None or golden is None:
        message = MSG_MISSING
    elif t_stats[1] in ("", "[]") or t_stats[1] != g_stats[1] or t_stats[0] != g_stats[0]:
        message = ((MSG_SCALAR if t_stats[1] in ("", "[]") else MSG_STAT_SHAPE if t_stats[1] != g_stats[1] else "")
                   + MSG_DTYPE * (t_stats[0] != g_stats[0]))
    else:
        message = ""
        for index, (n, b) in enumerate(zip(t_stats[2:], g_stats[2:])):
            diff = n - b
            diffs[index] = diff
            if b == 0:
                diffs[4 + index] = NA
            elif math.isnan(diff):
                diffs[4 + index] = "Nan"
            else:
                diffs[4 + index] = f"{abs(diff / b * 100)!r}%"
        message = (MSG_NAN_NPU * any(math.isnan(v) for v in t_stats[2:])
                   + MSG_NAN_BENCH * any(math.isnan(v) for v in g_stats[2:]))
        ratio = diffs[0] / (max(t_stats[2], g_stats[2]) + 1e-10)
        verdict = "Yes" if not message and ratio <= 0.5 else "No"
    return row + [verdict, message] + diffs + [target.csv_file if target else "", golden.csv_file if golden else ""]


@dataclass
class KernelPair:
    rank: int
    step: int
    target_dirs: list
    golden_dirs: list

    @property
    def label(self) -> str:
        return f"[rank {self.rank} step {self.step}] "


def kernel_pairs(target_root: str, golden_root: str, ranks: list | None, steps: list | None):
    """The (rank, step) keys present on both sides, filtered; plus problems for one-sided keys."""
    found_t, found_g = scan(target_root), scan(golden_root)
    problems = []
    keys = sorted(set(found_t) | set(found_g))
    if ranks:
        keys = [k for k in keys if k[0] in ranks]
    if steps:
        keys = [k for k in keys if k[1] in steps]
    pairs = []
    for key in keys:
        if key not in found_t or key not in found_g:
            side = "target" if key in found_t else "golden"
            problems.append(f"rank {key[0]} step {key[1]} exists only in the {side} dump; not compared.")
            continue
        pairs.append(KernelPair(key[0], key[1], found_t[key], found_g[key]))
    return pairs, problems


def build_kernel_table(pair: KernelPair) -> ResultTable:
    """The result table of one (rank, step)."""
    sides = []
    for directories in (pair.target_dirs, pair.golden_dirs):
        modes, items = set(), []
        for directory in directories:
            data = read_data_dir(directory)
            if data is not None:
                modes.add(data.mode)
                items.extend(data.items)
        sides.append((modes, items))
    (t_modes, t_items), (g_modes, g_items) = sides
    if not t_modes or not g_modes:
        raise MsprobeError(f"rank {pair.rank} step {pair.step}: no .npy files or statistic.csv found.")
    if t_modes != g_modes or len(t_modes) > 1:
        raise MsprobeError(f"rank {pair.rank} step {pair.step}: NPU mode {'/'.join(sorted(t_modes))} not equal to "
                           f"MATCH mode {'/'.join(sorted(g_modes))}.")
    mode = t_modes.pop()
    target, golden = numbered(t_items), numbered(g_items)
    keys = execution_order(target, golden)
    compare = compare_npy_pair if mode == "npy" else compare_stat_pair
    columns = NPY_COLUMNS if mode == "npy" else STAT_COLUMNS
    rows = [compare(target.get(k), golden.get(k)) for k in keys]
    cells = {name: [row[i] for row in rows] for i, name in enumerate(columns)}
    numeric = frozenset(columns[6:14]) | frozenset(columns[16:22])
    return ResultTable(columns=list(columns), cells=cells, numeric_columns=numeric)


@dataclass
class KernelSummary:
    label: str
    rows: int
    accuracy: dict
    output: str


def run_kernel_pair(pair: KernelPair, options) -> KernelSummary:
    """Compare one (rank, step) and write compare_result_{rank}_{step}_{timestamp}.xlsx|csv."""
    label = pair.label
    try:
        table = build_kernel_table(pair)
        extension = "csv" if options.output_format == "csv" else "xlsx"
        stamp = options.stamp or timestamp()
        path = os.path.join(options.output_dir, f"compare_result_{pair.rank}_{pair.step}_{stamp}.{extension}")
        write_table(table, path, ACCURACY, ACCURACY_FILLS)
    except (MsprobeError, OSError) as exc:
        return JobFailure(label, str(exc))
    counts: dict = {}
    for value in table.cells[ACCURACY]:
        counts[value or "not compared"] = counts.get(value or "not compared", 0) + 1
    get_logger().info("Compare rank: %d step: %d finish. Compare result: %s.", pair.rank, pair.step, path)
    return KernelSummary(label, len(table), counts, path)


def kernel_files(summary: KernelSummary) -> list:
    return [summary.output]


def parse_id_list(text: str | None, what: str) -> list | None:
    """'0,1, 3' -> [0, 1, 3]; None or '' -> None (all)."""
    if text is None or not text.strip():
        return None
    values = []
    for part in text.split(","):
        number = counter(part.strip())
        if number is None:
            raise MsprobeError(f"--{what} must be a comma-separated list of non-negative integers (digits 0-9), "
                               f"got {text!r}.")
        values.append(number)
    return values
