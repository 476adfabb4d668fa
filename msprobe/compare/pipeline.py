"""Compare one target/golden pair of dump files: read -> flatten -> match -> measure -> judge -> write."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from operator import itemgetter

import numpy as np

from msprobe.compare.advisor import Advice, advise
from msprobe.compare.mapping import MappingOptions, build_mappings, write_data_mapping
from msprobe.compare.match import Pairs, match_exact, match_fuzzy, match_mapped
from msprobe.compare.rules import JudgeInput
from msprobe.compare.stats import stat_diff
from msprobe.compare.tensor_metrics import METRICS, UNSUPPORTED, TensorResult, compare_arrays, fill
from msprobe.compare.verdict import LEVELS, Verdict, judge_rows
from msprobe.dump.flatten import Items, entry_has_md5, flatten, tree_has_md5
from msprobe.dump.paths import is_plain_file_name, safe_tensor_path
from msprobe.dump.reader import Dump, read_dump
from msprobe.dump.tensors import TensorReadError, load_tensor
from msprobe.errors import MsprobeError
from msprobe.io import write_text
from msprobe.log import get_logger, progress
from msprobe.names import printable
from msprobe.scale.stamp import timestamp
from msprobe.table import columns as col
from msprobe.table.cells import NA, number_or_none
from msprobe.table.model import ResultTable

NPU_NO_FILE = "NPU does not have data file."
BENCH_NO_FILE = "Bench does not have data file."
BENCH_UNMATCHED = "Bench api/module unmatched."


@dataclass(frozen=True)
class CompareOptions:
    """Options of one compare run (the CLI builds it; other commands may too)."""

    output_dir: str = "./output"
    output_format: str = "xlsx"          # "xlsx" | "csv"
    tensor_log: bool = False             # one log line per compared tensor pair
    compare_only: bool = False           # no advisor
    fuzzy: bool = False                  # -fm: pair API calls by order under their parent module
    mapping: MappingOptions = MappingOptions()  # -am / -cm / -dm / -lm
    jobs: int = 2                        # worker threads for tensor pairs
    write_output: bool = True
    html: bool = False                   # --html: a self-contained HTML report beside the table
    stamp: str = ""                      # timestamp of the output names; one per run of many pairs (else now)
    stat_numbers: bool = False           # statistics diffs of float pairs as numbers (stat_diff), not written
    stack: str | None = None             # NPU_Stack_Info from: None the target's stack.json if any, "" none, a path

    def __post_init__(self):
        if self.stat_numbers and self.write_output:
            raise ValueError("stat_numbers gives cells that the result writers cannot spell")


@dataclass
class CompareSummary:
    """What one compare produced: counts, first error and where the outputs are."""

    label: str
    mode: str
    rows: int = 0
    matched: int = 0
    results: dict = field(default_factory=dict)
    first_error: str | None = None        # the culprit's item name (compare/verdict.py; the advisor's row)
    first_error_row: int | None = None    # its 1-based row
    output: str | None = None
    advisor_file: str | None = None
    html_file: str | None = None
    advice: Advice | None = None
    tensor_problems: int = 0


@dataclass(frozen=True)
class Side:
    """One side of a compare after reading: the dump's metadata (its parsed data released), its items, and
    whether it records md5 values."""

    dump: Dump
    items: Items
    has_md5: bool


def side_of(dump: Dump, records: bool = False) -> Side:
    """Flatten a read dump and release its parsed data; with `records` the items keep every leaf's parsed dict
    (Items.record, read by the graph), else those go with the parsed data."""
    items = flatten(dump.data, dump.path, dump.is_debug)
    if not records:
        items.record = []
    return Side(replace(dump, data={}), items, _has_md5(dump))


def read_side(path: str, role: str, with_stack: bool, with_construct: bool, stack_path: str | None = None) -> Side:
    return side_of(read_dump(path, role, with_stack=with_stack, with_construct=with_construct,
                             stack_path=stack_path))


def read_sides(target_path: str, golden_path: str, with_construct: bool,
               stack: str | None = None) -> tuple[Side, Side]:
    """Read and flatten both sides, one after the other: each side's parsed JSON is released before the next
    is read, which keeps the peak memory near one parsed dump plus two item tables. `stack` as
    CompareOptions.stack."""
    return (read_side(target_path, "target", stack != "", with_construct, stack or None),
            read_side(golden_path, "golden", False, with_construct))


def dump_mode(target: Side, golden: Side) -> str:
    """statistics, md5 or tensor from the two dumps' task and content (spec §3.2)."""
    if target.dump.is_debug != golden.dump.is_debug:
        raise MsprobeError("The target and golden must both be dump.json or both be debug.json dumps.")
    task = target.dump.task
    if task != golden.dump.task:
        raise MsprobeError(f"Please check the dump task is consistent: target task is {task!r}, "
                           f"golden task is {golden.dump.task!r}.")
    if task == "tensor":
        return col.TENSOR
    if task != "statistics":
        raise MsprobeError(f"Compare applies only to task tensor or statistics, got {task!r}.")
    has_md5 = [target.has_md5, golden.has_md5]
    if has_md5[0] != has_md5[1]:
        raise MsprobeError("The dump mode of target and golden should both be statistics or both md5 "
                           f"(target: {'md5' if has_md5[0] else 'statistics'}, "
                           f"golden: {'md5' if has_md5[1] else 'statistics'}).")
    return col.MD5 if has_md5[0] else col.STATISTICS


def _has_md5(dump: Dump) -> bool:
    if dump.is_debug:
        return tree_has_md5(dump.data)
    return any(entry_has_md5(body) for body in dump.data.values())


def _take(values: list, index: np.ndarray) -> list:
    """values[i] for every i of index (row indices, all >= 0): a copy when index is every row in order (pairs of
    exact names usually are), else gathered in C."""
    count = len(index)
    if count == len(values) and (not count or (index[0] == 0 and bool((np.diff(index) == 1).all()))):
        return list(values)
    if count < 2:
        return [values[i] for i in index.tolist()]
    return list(itemgetter(*index.tolist())(values))


def _take_or(values: list, index: np.ndarray, missing, none_as=None) -> list:
    """_take, with missing for every index below 0 (and none_as in place of None, if given)."""
    if none_as is None:
        if not len(index) or index.min() >= 0:
            return _take(values, index)
        return [values[i] if i >= 0 else missing for i in index.tolist()]
    out = []
    for i in index.tolist():
        if i < 0:
            out.append(missing)
        else:
            value = values[i]
            out.append(none_as if value is None else value)
    return out


def _na_if_none(values: list) -> list:
    return [NA if v is None else v for v in values]


def result_file_name(prefix: str, suffix: str, extension: str, stamp: str) -> str:
    return f"{prefix}{suffix}_{stamp}.{extension}"


@dataclass
class ComparedPair:
    """One compared pair before anything is written: the judged table, its summary, and what the writers need of
    the target dump (the Python API keeps it; compare_files writes it at once)."""

    table: ResultTable
    summary: CompareSummary
    target_path: str
    is_debug: bool
    construct: dict | None = None       # the target's construct.json when the compare read it
    data_mapping: dict | None = None    # the data mapping -lm generated, when the compare did not write it


def compare_files(target_path: str, golden_path: str, options: CompareOptions, suffix: str = "",
                  label: str = "") -> CompareSummary:
    """Compare one pair of dump.json (or debug.json) files and write the result table (and the advisor)."""
    stamp = options.stamp or timestamp()
    pair = compute_pair(target_path, golden_path, options, suffix, label, stamp)
    if not options.write_output:
        return pair.summary
    return write_pair(pair, options.output_dir, stamp, suffix, label, table_format=options.output_format,
                      html=options.html, advisor=not options.compare_only)


def compute_pair(target_path: str, golden_path: str, options: CompareOptions, suffix: str = "", label: str = "",
                 stamp: str | None = None) -> ComparedPair:
    """Read and compare one pair of dump files; only the data mapping of -lm is written (when
    options.write_output), as the compare generates it."""
    base_t, base_g = os.path.basename(target_path), os.path.basename(golden_path)
    if {base_t, base_g} == {"dump.json", "debug.json"}:
        raise MsprobeError("The target and golden files must both be dump.json or both be debug.json.")
    needs_construct = options.fuzzy or options.mapping.layer is not None
    target, golden = read_sides(target_path, golden_path, needs_construct, options.stack)
    generated: dict = {}
    table, summary = compare_dumps(target, golden, options, label, stamp or timestamp(), suffix, generated)
    return ComparedPair(table, summary, target_path, target.dump.is_debug, target.dump.construct,
                        generated if generated and not options.write_output else None)


def write_pair(pair: ComparedPair, output_dir: str, stamp: str, suffix: str = "", label: str = "", *,
               table_format: str | None = "xlsx", html: bool = False, advisor: bool = True) -> CompareSummary:
    """Write a compared pair into output_dir as `msprobe compare` does, every name carrying stamp: the table
    (table_format "csv" or "xlsx"; None: none), the HTML page beside it, the advisor, and a data mapping generated
    by -lm. Returns a copy of the summary with the paths written."""
    logger = get_logger()
    summary = replace(pair.summary)
    prefix = "debug_compare_result" if pair.is_debug else "compare_result"
    extension = "csv" if table_format == "csv" else "xlsx"
    path = os.path.join(output_dir, result_file_name(prefix, suffix, extension, stamp))
    os.makedirs(output_dir, exist_ok=True)
    if pair.data_mapping:
        write_data_mapping(pair.data_mapping, output_dir, suffix, stamp, label)
    if table_format is not None:
        logger.info("%sSaving result file in progress...", label)
        write_table(pair.table, path)
        logger.info("%sThe result file path is: %s.", label, path)
    summary.output = path
    if html:
        from msprobe.report.html import write_compare_html

        summary.html_file = write_compare_html(pair.table, summary, path, pair.target_path, pair.construct)
    if advisor:
        advisor_path = os.path.join(output_dir, result_file_name("advisor", suffix, "txt", stamp))
        write_text(advisor_path, "".join(printable(line) + "\n" for line in summary.advice.lines()))
        summary.advisor_file = advisor_path
    return summary


def compare_dumps(target: Side | Dump, golden: Side | Dump, options: CompareOptions, label: str = "",
                  stamp: str | None = None, suffix: str = "",
                  generated: dict | None = None) -> tuple[ResultTable, CompareSummary]:
    """The judged result table of two read dumps, and its summary; nothing is written but the data mapping of -lm
    (when options.write_output; `generated` receives it either way)."""
    logger = get_logger()
    target = target if isinstance(target, Side) else side_of(target)
    golden = golden if isinstance(golden, Side) else side_of(golden)
    mode = dump_mode(target, golden)
    logger.info("%sCompare mode: %s.", label, "real data" if mode == col.TENSOR else mode)
    t_items, g_items = target.items, golden.items
    target, golden = target.dump, golden.dump
    if not len(t_items) or not len(g_items):
        raise MsprobeError(f"No valid data found in the {'target' if not len(t_items) else 'golden'} dump "
                           "(no entry with a recognised name holds any item); no result file generated.")
    logger.info("%sMatching APIs/Modules in progress...", label)
    pairs = match_items(target, golden, t_items, g_items, options, label, stamp, suffix, generated)
    logger.info("%sAPIs/Modules match done: %d rows, %d matched.", label, len(pairs), int(pairs.matched.sum()))
    table, judge_input = build_table(mode, target, golden, t_items, g_items, pairs, options, label)
    verdict = judge_table(table, judge_input, target, golden, t_items, g_items, pairs, options)
    results, messages, origins = verdict.results, verdict.messages, verdict.origins
    summary = CompareSummary(label=label, mode=mode, rows=len(table), matched=int(pairs.matched.sum()))
    for result in results:
        summary.results[result] = summary.results.get(result, 0) + 1
    summary.tensor_problems = len(judge_input.tensor_problems or ())
    advice = advise(table.cells[col.NPU_NAME], _take(t_items.state, pairs.target), results, messages,
                    summary.matched, origins, culprit=verdict.culprit, dtypes=judge_input.dtypes,
                    framework=target.framework)
    if not summary.matched:
        logger.warning("%sCan't match any op: no target item has a golden partner.", label)
    summary.advice = advice
    if advice.row is not None:
        summary.first_error, summary.first_error_row = advice.node, advice.row
    return table, summary


def is_cross(target: Dump, golden: Dump, options: CompareOptions) -> bool:
    """Two frameworks (or a mapping option, which pairs a MindSpore target with a PyTorch golden): their
    conventions are not errors (compare/verdict.py)."""
    return target.framework != golden.framework or options.mapping.active


def judge_table(table: ResultTable, judge_input: JudgeInput, target: Dump, golden: Dump, t_items: Items,
                g_items: Items, pairs: Pairs, options: CompareOptions) -> Verdict:
    """The verdict of every row (compare/verdict.py), written into the table's Result, Err_message and (statistics
    and real data) Error_Origin columns."""
    ops = [parts.op_no_number for parts in t_items.entry_parts] if len(t_items.entry_parts) == len(
        t_items.entry_names) else None
    verdict = judge_rows(judge_input, table.cells, _take(t_items.state, pairs.target),
                         _take(t_items.is_tensor, pairs.target), is_cross(target, golden, options),
                         (t_items, g_items, pairs), ops)
    table.cells[col.RESULT] = verdict.results
    table.cells[LEVELS] = verdict.levels          # not a column: for the views of this run (msprobe graph)
    table.cells[col.ERR_MESSAGE] = verdict.messages
    if verdict.origins is not None:
        table.cells[col.ERROR_ORIGIN] = verdict.origins
    return verdict


def match_items(target: Dump, golden: Dump, t_items: Items, g_items: Items, options: CompareOptions,
                label: str = "", stamp: str | None = None, suffix: str = "", generated: dict | None = None) -> Pairs:
    """Pairs by the strategy the options select: mappings, fuzzy or exact names. `generated` receives the data
    mapping that -lm generated."""
    debug = target.is_debug and golden.is_debug
    cross = target.framework != golden.framework
    if options.mapping.active and not debug:
        output_dir = options.output_dir if options.write_output else None
        mappings = build_mappings(options.mapping, target, golden, t_items, g_items, output_dir,
                                  stamp or timestamp(), label, suffix)
        if generated is not None:
            generated.update(mappings.generated)
        return match_mapped(t_items, g_items, mappings, cross_framework=cross)
    if options.fuzzy and not debug:
        return match_fuzzy(t_items, g_items, target.construct, golden.construct, cross_framework=cross)
    return match_exact(t_items, g_items, renumber_backward=not debug, cross_framework=cross)


def write_table(table: ResultTable, path: str, highlight_column: str = col.RESULT, fills: dict | None = None) -> None:
    """CSV or XLSX by the path's extension; xlsx rows are filled by the value of highlight_column."""
    if path.endswith(".csv"):
        from msprobe.table.csv_writer import write_csv

        write_csv(table, path)
    else:
        from msprobe.table.xlsx_writer import write_xlsx

        write_xlsx(table, path, highlight_column, fills)


def build_table(mode: str, target: Dump, golden: Dump, t_items: Items, g_items: Items, pairs: Pairs,
                options: CompareOptions, label: str = "") -> tuple[ResultTable, JudgeInput]:
    """Measure every row and lay out the columns of the mode (Result/Err_message are added by judge)."""
    t, g = pairs.target, pairs.golden
    matched = pairs.matched
    with_stack = target.stack is not None
    columns = col.columns_for(mode, with_stack)
    cells: dict = {}
    cells[col.NPU_NAME] = _take(t_items.name, t)
    cells[col.BENCH_NAME] = _take_or(g_items.name, g, NA)
    t_dtype, g_dtype = _take(t_items.dtype, t), _take_or(g_items.dtype, g, None)
    t_shape, g_shape = _take(t_items.shape, t), _take_or(g_items.shape, g, None)
    t_grad, g_grad = _take(t_items.requires_grad, t), _take_or(g_items.requires_grad, g, None)
    cells["NPU Dtype"], cells["Bench Dtype"] = _na_if_none(t_dtype), _na_if_none(g_dtype)
    cells["NPU Tensor Shape"], cells["Bench Tensor Shape"] = _na_if_none(t_shape), _na_if_none(g_shape)
    cells["NPU Requires_grad"], cells["Bench Requires_grad"] = _na_if_none(t_grad), _na_if_none(g_grad)
    stat_names = ("max", "min", "mean", "l2norm")
    stat_lists_t = (t_items.stat_max, t_items.stat_min, t_items.stat_mean, t_items.stat_norm)
    stat_lists_g = (g_items.stat_max, g_items.stat_min, g_items.stat_mean, g_items.stat_norm)
    for stat, values_t, values_g in zip(stat_names, stat_lists_t, stat_lists_g):
        cells[f"NPU {stat}"] = _take(values_t, t)
        cells[f"Bench {stat}"] = _take_or(values_g, g, NA)
    cells[col.REQUIRES_GRAD_CONSISTENT] = [a is None or b is None or a == b for a, b in zip(t_grad, g_grad)]
    judge_input = JudgeInput(
        mode=mode, entry=np.asarray(_take(t_items.entry, t), dtype=np.int64), entry_names=t_items.entry_names,
        is_output=np.asarray([s == "output" for s in _take(t_items.state, t)], dtype=bool), matched=matched,
        bench_names=cells[col.BENCH_NAME], dtypes=(t_dtype, g_dtype), shapes=(t_shape, g_shape),
        grads=(t_grad, g_grad), npu_max=cells["NPU max"], npu_min=cells["NPU min"],
        bench_max=cells["Bench max"], bench_min=cells["Bench min"], dump_notes=_dump_notes(t_items, g_items, pairs))
    numeric = set(col.STAT_VALUES)
    if mode == col.STATISTICS:
        for diff_name, rel_name, stat in zip(col.STAT_DIFFS[:4], col.STAT_DIFFS[4:], stat_names):
            diffs, rels, fractions = stat_diff(cells[f"NPU {stat}"], cells[f"Bench {stat}"], options.stat_numbers)
            cells[diff_name], cells[rel_name] = diffs, rels
            if stat == "l2norm":
                judge_input.norm_rel = fractions
    elif mode == col.MD5:
        cells[col.NPU_MD5] = _na_if_none(_take(t_items.md5, t))
        cells[col.BENCH_MD5] = _take_or(g_items.md5, g, NA, none_as=NA)
        judge_input.md5 = (cells[col.NPU_MD5], cells[col.BENCH_MD5])
    else:
        results, problems = measure_tensors(target, golden, t_items, g_items, pairs, options, label)
        for index, name in enumerate(METRICS):
            cells[name] = [r.cells[index] for r in results]
        numeric.update(METRICS)
        judge_input.cosine = np.asarray([_as_float(r.cells[0]) for r in results])
        judge_input.thousandth = np.asarray([_as_float(r.cells[4]) for r in results])
        judge_input.tensor_problems = problems
        t_names = _take(t_items.data_name, t)
        g_names = _take_or(g_items.data_name, g, NA)
        cells[col.DATA_NAME] = [str([a, b]) for a, b in zip(t_names, g_names)]
    if with_stack:
        cells[col.STACK] = stack_column(target.stack, t_items, judge_input.entry)
    # the columns that carry text from the dumps, checked for formulas by the writers (table/safety.py)
    free_text = set(col.BASIC[:6]) | {col.DATA_NAME, col.STACK} | set(col.MD5_VALUES)
    return ResultTable(columns=columns, cells=cells, numeric_columns=frozenset(numeric),
                       text_columns=frozenset(free_text)), judge_input


def _dump_notes(t_items: Items, g_items: Items, pairs: Pairs) -> list:
    """(row, side, text) of the rows whose NPU or Bench value the collector could not record (dump_error)."""
    notes = []
    for side, items, index in (("NPU", t_items, pairs.target), ("Bench", g_items, pairs.golden)):
        if items.notes:
            for item in sorted(items.notes):
                notes.extend((int(row), side, items.notes[item]) for row in np.flatnonzero(index == item))
    return sorted(notes)


def _as_float(value) -> float:
    number = number_or_none(value)
    return np.nan if number is None else number


def stack_column(stacks: dict, items: Items, entry: np.ndarray) -> list:
    """The entry's stack on its first row, N/A elsewhere."""
    column = [NA] * len(entry)
    if not len(entry):
        return column
    firsts = np.flatnonzero(np.concatenate(([True], entry[1:] != entry[:-1])))     # where a run of rows starts
    cache: dict = {}
    names = items.entry_names
    for row, index in zip(firsts.tolist(), entry[firsts].tolist()):
        lines = stacks.get(names[index])
        if lines is not None:
            text = cache.get(id(lines))
            if text is None:
                text = cache[id(lines)] = str(lines)
            column[row] = text
    return column


def measure_tensors(target: Dump, golden: Dump, t_items: Items, g_items: Items, pairs: Pairs,
                    options: CompareOptions, label: str = "") -> tuple[list, list]:
    """Real-data metrics per row; tensor pairs are read and compared by a pool of threads, in order."""
    logger = get_logger()
    rows = len(pairs)
    results: list = [None] * rows
    tasks = []
    for row, (i, j) in enumerate(zip(pairs.target.tolist(), pairs.golden.tolist())):
        t_name = t_items.data_name[i]
        if t_name == "-1":
            results[row] = fill(UNSUPPORTED, [NPU_NO_FILE])
        elif j < 0:
            if not is_plain_file_name(t_name):
                results[row] = fill(UNSUPPORTED, [safe_tensor_path(target.tensor_dir, t_name)[1]], "unreadable")
            else:
                results[row] = fill(UNSUPPORTED, [BENCH_UNMATCHED])
        elif g_items.data_name[j] == "-1":
            results[row] = fill(UNSUPPORTED, [BENCH_NO_FILE])
        else:
            tasks.append((row, t_name, g_items.data_name[j]))
    for directory, side in ((target.tensor_dir, "target"), (golden.tensor_dir, "golden")):
        if tasks and not os.path.isdir(directory):
            logger.warning("%sThe %s tensor directory %s does not exist; its tensors cannot be compared.",
                           label, side, directory)
    logger.info("%sCompare real data in progress... (%d tensor pairs)", label, len(tasks))
    cross = is_cross(target, golden, options)       # a reshape across frameworks is compared flat

    def run(task):
        row, t_name, g_name = task
        try:
            array_t = load_tensor(target.tensor_dir, t_name)
            array_g = load_tensor(golden.tensor_dir, g_name)
        except TensorReadError as exc:
            return row, fill(UNSUPPORTED, [str(exc)], "unreadable")
        return row, compare_arrays(array_t, array_g, flat=cross)

    bar = progress(total=len(tasks), desc=f"{label}API/Module Item Compare Process")
    workers = max(1, min(options.jobs, len(tasks)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for row, result in pool.map(run, tasks, chunksize=1) if workers > 1 else map(run, tasks):
            results[row] = result
            if options.tensor_log:
                _log_tensor(logger, t_items.name[pairs.target[row]], result)
            bar.update(1)
    bar.close()
    logger.info("%sCompare real data done.", label)
    problems = [(row, result.problem, "; ".join(result.notes)) for row, result in enumerate(results)
                if result.problem in ("unreadable", "nan_position")]
    return results, problems


def _log_tensor(logger, name: str, result: TensorResult) -> None:
    values = ", ".join(f"{metric} {value}" for metric, value in zip(METRICS, result.cells))
    note = " ".join(result.notes)
    logger.info("[%s] Compare result: %s%s", name, values, f", {note}" if note else "")
