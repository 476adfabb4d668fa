"""The Python API: compare dumps, find the first divergence and read a dump from a notebook or a script.

    import msprobe
    result = msprobe.compare("target/dump.json", "golden/dump.json")
    result.to_pandas().sort_values("MaxRelativeErr").tail(10)

Every function runs the pipeline of the `msprobe compare` command (msprobe/compare/): the same reading, matching,
measures and verdicts, so `result.write(...)` writes the very files the command writes. Nothing is written until
`write` is called, nothing is printed (records go to the `msprobe` logger, silent unless logging is configured),
errors are the MsprobeError classes of msprobe.errors, and pandas is imported only by `to_pandas()`.

This module imports no numpy at import time: `import msprobe` stays light (the heavy modules load on the first call).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from msprobe.errors import MsprobeError, UsageError
from msprobe.log import get_logger
from msprobe.optional import require
from msprobe.table import columns as col

if TYPE_CHECKING:
    import pandas

    from msprobe.compare.pipeline import ComparedPair
    from msprobe.dump.locate import Job

__all__ = ["compare", "diff_analyze", "read_dump", "CompareResult", "PairResult", "Summary", "DiffAnalysis",
           "DivergentOp", "DumpEntries", "DumpEntry", "kernel_compare", "KernelCompareResult"]

FORMATS = ("xlsx", "csv", "html")
RANK_COLUMN = "Rank"       # the first column of a folder compare's rows: the pair's folder, e.g. rank1, step0/rank1


# ---------------------------------------------------------------------------------------------------------------
# quiet by default: records reach only the handlers somebody configured

_quiet_lock = threading.Lock()
_quiet_calls = 0
_NULL_HANDLER = logging.NullHandler()


@contextlib.contextmanager
def _quiet() -> Iterator[bool]:
    """While an API call runs and the `msprobe` logger has no handler of its own, it gets a NullHandler: its
    records then go only to handlers the user configured (logging.basicConfig, ...) instead of Python's
    last-resort stderr printer, and the workers' set-up (setup_logging) adds no console handler either.
    Yields whether the call is quiet (no handler of msprobe's or the user's on the msprobe logger)."""
    global _quiet_calls
    logger = get_logger()
    with _quiet_lock:
        quiet = _quiet_calls > 0 or not logger.handlers
        if quiet:
            if _quiet_calls == 0:
                logger.addHandler(_NULL_HANDLER)
            _quiet_calls += 1
    try:
        yield quiet
    finally:
        if quiet:
            with _quiet_lock:
                _quiet_calls -= 1
                if _quiet_calls == 0:
                    logger.removeHandler(_NULL_HANDLER)


def _silence_worker_process() -> None:
    """In a worker process of a quiet call: the msprobe logger as a library leaves it (a process started by spawn
    or forkserver has run setup_logging, which prints to stdout)."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return
    logger = get_logger()
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(logging.NullHandler())
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


@dataclass(frozen=True)
class _Task:
    """One job of a folder, as a worker of the scale-out executor receives it."""

    job: Job
    quiet: bool

    @property
    def label(self) -> str:
        return self.job.label


def _compute_task(task: _Task, options) -> ComparedPair:
    from msprobe.compare.pipeline import compute_pair

    if task.quiet:
        _silence_worker_process()
    return compute_pair(task.job.target, task.job.golden, options, task.job.suffix, task.job.label)


def _analyze_task(task: _Task, options):
    from msprobe.compare.diff_analyze import analyze_job

    if task.quiet:
        _silence_worker_process()
    return analyze_job(task.job, options)


# ---------------------------------------------------------------------------------------------------------------
# cells -> pandas


def _import_pandas():
    return require("pandas", "to_pandas()", ImportError)


_BOOL_TEXTS = {"True": 1.0, "False": 0.0}


def _float_column(values: list) -> list:
    """The cells of a metric column as floats: numbers as they are, the statistics of bool tensors (True/False) as
    1/0, `12.5%` as 0.125, `inf`/`-inf` as infinities, anything else (N/A, None, Nan, texts such as `Diff`) as
    NaN. Texts recur (0, N/A, a tensor's statistics on several rows): each is parsed once."""
    from msprobe.table.cells import number_or_none, stat_number

    nan = math.nan
    parsed: dict = {}
    out = []
    append = out.append
    for value in values:
        kind = type(value)
        if kind is float:
            append(value)
        elif kind is str:
            number = parsed.get(value)
            if number is None:
                number = _BOOL_TEXTS.get(value)
                if number is None:
                    number = number_or_none(value)
                    number = nan if number is None else number
                parsed[value] = number
            append(number)
        elif value is True or value is False:
            append(float(value))
        else:                          # ints (beyond the float range: infinities), numpy numbers; None
            number = stat_number(value)
            append(nan if number is None else number)
    return out


def _text_column(values: list) -> list:
    from msprobe.table.cells import NA

    nan = math.nan
    return [nan if value is None or value == NA else value for value in values]


def _metric_columns(table) -> frozenset:
    return frozenset(table.numeric_columns) | frozenset(col.STAT_DIFFS)


def _data_frame(columns: Sequence[str], cells: dict, metrics: frozenset) -> pandas.DataFrame:
    """Metric columns as float64, Requires_grad Consistent as bool, the Rank column as it is, the other columns as
    text with N/A as NaN."""
    pandas = _import_pandas()
    data = {}
    for name in columns:
        values = cells[name]
        if name in metrics:
            data[name] = pandas.Series(_float_column(values), dtype="float64")
        elif name == col.REQUIRES_GRAD_CONSISTENT:
            data[name] = pandas.Series([v is True or v == "True" for v in values], dtype="bool")
        elif name == RANK_COLUMN:
            data[name] = pandas.Series(values, dtype="object")
        else:
            data[name] = pandas.Series(_text_column(values), dtype="object")
    return pandas.DataFrame(data, columns=list(columns))


# ---------------------------------------------------------------------------------------------------------------
# compare


@dataclass(frozen=True)
class Summary:
    """Counts per verdict and the culprit of a compare (summed over the pairs of a folder)."""

    mode: str                            # statistics | md5 | tensor
    rows: int
    matched: int                         # rows with a golden partner
    counts: dict                         # verdict -> rows: {"pass": n, "warning": n, "error": n}
    first_error: str | None = None       # NPU Name of the culprit row (the advisor's: docs/compare.md §7)
    first_error_row: int | None = None   # its 1-based data row in its table (the advisor file's `Line`)
    first_error_rank: str | None = None  # folders: the pair (e.g. rank1) whose table holds it
    advice: str | None = None            # the advisor's reading of the culprit
    tensor_problems: int = 0             # tensor pairs that could not be compared (see Err_message)

    def __str__(self) -> str:
        counts = ", ".join(f"{self.counts.get(k, 0)} {k}" for k in ("pass", "warning", "error"))
        line = f"{self.rows} rows ({self.matched} matched): {counts}"
        if self.first_error is not None:
            where = f"{self.first_error_rank}, " if self.first_error_rank else ""
            line += f"; culprit: {self.first_error} ({where}row {self.first_error_row})"
        return line


def _summary_of(summary, rank: str | None = None) -> Summary:
    return Summary(summary.mode, summary.rows, summary.matched,
                   {k: summary.results.get(k, 0) for k in ("pass", "warning", "error")},
                   summary.first_error, summary.first_error_row, rank if summary.first_error else None,
                   summary.advice.text if summary.advice is not None else None, summary.tensor_problems)


class PairResult:
    """The judged result table of one pair of dump files (one rank of a folder)."""

    def __init__(self, pair: ComparedPair, job: Job):
        self._pair = pair
        self._job = job
        self.label: str = job.label.strip().strip("[]").strip()
        """The pair's folder (`rank1`, `step0/rank1`); empty for a pair of files."""
        self.target: str = job.target
        self.golden: str = job.golden
        self.summary: Summary = _summary_of(pair.summary, self.label or None)

    @property
    def mode(self) -> str:
        return self._pair.summary.mode

    @property
    def columns(self) -> list[str]:
        """Column names in the order the table is written."""
        return list(self._pair.table.columns)

    @property
    def cells(self) -> dict[str, list]:
        """The columnar view: column name -> cell values, as written (texts, numbers, `N/A`). Do not modify."""
        return self._pair.table.cells

    def column(self, name: str) -> list:
        """The cells of one column (KeyError for a column the mode does not have)."""
        return self._pair.table.cells[name]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per row (column name -> cell value), built on each access."""
        cells = self._pair.table.cells
        names = self._pair.table.columns
        return [dict(zip(names, values)) for values in zip(*(cells[name] for name in names))]

    def __len__(self) -> int:
        return len(self._pair.table)

    def to_pandas(self) -> pandas.DataFrame:
        """The table as a DataFrame: metric and statistic columns as float64 (`12.5%` as 0.125, `N/A`, `None` and
        other texts as NaN), Requires_grad Consistent as bool, the other columns as text with `N/A` as NaN."""
        return _data_frame(self._pair.table.columns, self._pair.table.cells, _metric_columns(self._pair.table))

    def __repr__(self) -> str:
        return f"<PairResult {self.label or os.path.basename(self.target)}: {self.summary}>"


class CompareResult:
    """What `compare` found: one PairResult per compared pair, with the folder's failures and skipped parts."""

    def __init__(self, pairs: list[PairResult], failures: dict[str, str], problems: list[str], folders: bool):
        self.pairs: tuple[PairResult, ...] = tuple(pairs)
        """Per compared pair (per rank of a folder), in the order of the folders."""
        self.failures: dict[str, str] = failures
        """Pairs of a folder that could not be compared: label -> one-line reason."""
        self.problems: list[str] = problems
        """Parts of the folders that were not compared (a rank on one side only, ...)."""
        self._folders = folders

    @property
    def ranks(self) -> dict[str, PairResult]:
        """Per-rank results of a folder compare, by label (`rank0`, `step1/rank3`)."""
        return {pair.label: pair for pair in self.pairs}

    def __getitem__(self, label: str) -> PairResult:
        return self.ranks[label]

    def __iter__(self) -> Iterator[PairResult]:
        return iter(self.pairs)

    @property
    def mode(self) -> str:
        return self.pairs[0].mode

    @property
    def columns(self) -> list[str]:
        """Column names; a folder compare's start with `Rank` (the pair's label)."""
        if not self._folders:
            return self.pairs[0].columns
        names = [RANK_COLUMN]
        for pair in self.pairs:
            names.extend(name for name in pair.columns if name not in names)
        return names

    def column(self, name: str) -> list:
        """The cells of one column over all pairs (N/A where a pair's table lacks it)."""
        if not self._folders:
            return self.pairs[0].column(name)
        if name not in self.columns:
            raise KeyError(name)
        from msprobe.table.cells import NA

        values: list = []
        for pair in self.pairs:
            if name == RANK_COLUMN:
                values.extend([pair.label] * len(pair))
            else:
                values.extend(pair.cells.get(name, [NA] * len(pair)))
        return values

    @property
    def cells(self) -> dict[str, list]:
        """The columnar view over all pairs: column name -> cell values, as written."""
        if not self._folders:
            return self.pairs[0].cells
        return {name: self.column(name) for name in self.columns}

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per row (column name -> cell value); a folder's rows carry `Rank`."""
        if not self._folders:
            return self.pairs[0].rows
        cells = self.cells
        return [dict(zip(cells, values)) for values in zip(*cells.values())]

    def __len__(self) -> int:
        return sum(len(pair) for pair in self.pairs)

    @property
    def summary(self) -> Summary:
        """Counts per verdict over all pairs; the first error is the first pair's (in folder order) that has one."""
        if len(self.pairs) == 1:
            return self.pairs[0].summary
        counts = {k: sum(p.summary.counts.get(k, 0) for p in self.pairs) for k in ("pass", "warning", "error")}
        first = next((p.summary for p in self.pairs if p.summary.first_error is not None), None)
        return Summary(self.mode, sum(p.summary.rows for p in self.pairs), sum(p.summary.matched for p in self.pairs),
                       counts, first.first_error if first else None, first.first_error_row if first else None,
                       first.first_error_rank if first else None, first.advice if first else None,
                       sum(p.summary.tensor_problems for p in self.pairs))

    def to_pandas(self) -> pandas.DataFrame:
        """All rows as one DataFrame (see PairResult.to_pandas); a folder compare's start with a `Rank` column."""
        if not self._folders:
            return self.pairs[0].to_pandas()
        metrics = frozenset().union(*(_metric_columns(p._pair.table) for p in self.pairs))
        return _data_frame(self.columns, self.cells, metrics)

    def write(self, output_dir: str | os.PathLike[str], format: str = "xlsx", *, html: bool = False,
              advisor: bool = True, stamp: str | None = None) -> list[str]:
        """Write the files `msprobe compare` writes, into output_dir (created if missing), and return their paths.

        format: "xlsx" (the command's default) or "csv" (`--csv`): the result table of every pair, named as the
        command names it (`compare_result[_rankN]_{stamp}.{ext}`, in `step*/` subfolders for a dump root);
        "html": only the HTML pages `--html` writes beside the xlsx tables (and `index_{stamp}.html` for folders).
        html: also the HTML pages beside the tables (`--html`). advisor: `advisor_{stamp}.txt` as the command
        writes it unless `-c`. A layer mapping's generated `data_mapping_{stamp}.yaml` is written too.
        stamp: the `YYYYmmddHHMMSS` of the names (default: a second no file of output_dir carries and no other run
        holds, claimed as the command claims it, so that two writes in one second never replace each other's
        files). The command's resume markers (.msprobe_done/) are not written."""
        from msprobe.dump.paths import prepare_output_dir
        from msprobe.scale.stamp import claimed_stamp

        path = os.fspath(output_dir) if isinstance(output_dir, (str, os.PathLike)) else None
        if not isinstance(path, str):
            raise UsageError(f"output_dir must be a path (str or os.PathLike of str), got {type(output_dir).__name__}.")
        if format not in FORMATS:
            raise UsageError(f"format must be one of {', '.join(FORMATS)}, got {format!r}.")
        if stamp is not None and not (isinstance(stamp, str) and len(stamp) == 14 and stamp.isascii() and stamp.isdigit()):
            raise UsageError(f"stamp must be 14 digits (YYYYmmddHHMMSS), got {stamp!r}.")
        with _quiet():
            directory = prepare_output_dir(path)
            subdirs = sorted({pair._job.out_subdir for pair in self.pairs if pair._job.out_subdir})
            with contextlib.nullcontext(stamp) if stamp else \
                    claimed_stamp([directory] + [os.path.join(directory, d) for d in subdirs]) as claimed:
                return self._write(directory, format, html, advisor, claimed)

    def _write(self, directory: str, format: str, html: bool, advisor: bool, stamp: str) -> list[str]:
        from msprobe.compare.mapping import data_mapping_path
        from msprobe.compare.pipeline import write_pair

        written: list[str] = []
        summaries = []
        html = html or format == "html"
        for pair in self.pairs:
            job = pair._job
            out = os.path.join(directory, job.out_subdir) if job.out_subdir else directory
            summary = write_pair(pair._pair, out, stamp, job.suffix, job.label,
                                 table_format=None if format == "html" else format, html=html, advisor=advisor)
            if pair._pair.data_mapping:
                written.append(data_mapping_path(out, job.suffix, stamp))
            written.extend(p for p in (summary.output if format != "html" else None, summary.html_file,
                                       summary.advisor_file) if p)
            summaries.append(summary)
        if html and self._folders:
            from msprobe.report.html import write_index

            index = write_index(summaries, directory, stamp)
            if index:
                written.append(index)
        return written

    def __repr__(self) -> str:
        if not self._folders:
            return f"<CompareResult {self.mode}: {self.summary}>"
        lines = [f"<CompareResult {self.mode}, {len(self.pairs)} pairs: {self.summary}"]
        lines += [f"  {pair.label}: {pair.summary}" for pair in self.pairs]
        lines += [f"  {label}: failed: {message}" for label, message in self.failures.items()]
        return "\n".join(lines) + ">"


def _mapping_option(value: bool | str | os.PathLike[str] | None, name: str, optional_value: bool = True):
    """A mapping argument as MappingOptions holds it: None (off), "" (built-in, for True) or a yaml path."""
    if value is None or value is False:
        return None
    if value is True:
        if not optional_value:
            raise UsageError(f"{name} needs the path of a yaml file.")
        return ""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if not path:
            raise UsageError(f"{name} needs the path of a yaml file (or True for the built-in mapping).")
        return path
    raise UsageError(f"{name} must be None, True or the path of a yaml file, got {type(value).__name__}.")


def _options(mode, fuzzy, api_mapping, cell_mapping, data_mapping, layer_mapping, jobs):
    from msprobe.compare.mapping import MappingOptions
    from msprobe.compare.pipeline import CompareOptions

    if mode not in (None, "auto"):
        raise UsageError(f"mode must be None or 'auto' (the mode follows the dumps), got {mode!r}.")
    if not isinstance(fuzzy, bool):
        raise UsageError(f"fuzzy must be True or False, got {fuzzy!r}.")
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise UsageError(f"jobs must be an integer of at least 1, got {jobs!r}.")
    mapping = MappingOptions(_mapping_option(api_mapping, "api_mapping"), _mapping_option(cell_mapping, "cell_mapping"),
                             _mapping_option(data_mapping, "data_mapping", optional_value=False),
                             _mapping_option(layer_mapping, "layer_mapping"))
    return CompareOptions(output_format="xlsx", jobs=jobs or os.cpu_count() or 1, fuzzy=bool(fuzzy), mapping=mapping,
                          write_output=False)


def _labelled(label: str, message: str) -> str:
    """A failure of one pair as the errors list it: `rank2: <message>`; a pair of files has no label."""
    return f"{label}: {message}" if label else message


def _locate(target, golden):
    from msprobe.dump.locate import locate

    if not isinstance(target, (str, os.PathLike)) or not isinstance(golden, (str, os.PathLike)):
        raise UsageError("target and golden must be paths (str or os.PathLike).")
    located = locate(os.fspath(target), os.fspath(golden))
    logger = get_logger()
    for problem in located.problems:
        logger.warning("%s", problem)
    if not located.jobs:
        raise MsprobeError("nothing to compare: " + "; ".join(located.problems))
    return located


def _folders(located) -> bool:
    """Whether the paths were folders of ranks or steps (the command's per-pair names and HTML index)."""
    return len(located.jobs) > 1 or bool(located.jobs[0].out_subdir or located.jobs[0].suffix)


def _run_jobs(worker, jobs: list, options, quiet: bool, desc: str) -> list:
    from msprobe.scale.executor import run_tasks
    from msprobe.scale.task import Backend

    backend = Backend("local", max(1, options.jobs))
    return run_tasks(worker, [_Task(job, quiet) for job in jobs], options, backend, None, desc).results


def compare(target: str | os.PathLike[str], golden: str | os.PathLike[str], *, mode: str | None = None,
            fuzzy: bool = False, api_mapping: bool | str | os.PathLike[str] | None = None,
            cell_mapping: bool | str | os.PathLike[str] | None = None,
            data_mapping: str | os.PathLike[str] | None = None,
            layer_mapping: bool | str | os.PathLike[str] | None = None, jobs: int | None = None) -> CompareResult:
    """Compare a target dump with a golden dump, as `msprobe compare -tp target -gp golden` does, writing nothing.

    target, golden: two dump.json (or debug.json) files, or two folders of the same kind (a rank folder, a step
    folder of rank*/proc* folders, a dump root of step* folders, a root with graph/ and pynative/ halves).
    mode: None or "auto" (the mode, statistics, md5 or tensor, follows the dumps).
    fuzzy: `-fm`, pair API calls by name and order under their parent module.
    api_mapping, cell_mapping, layer_mapping: `-am`, `-cm`, `-lm`: True for the built-in mapping, or a yaml path.
    data_mapping: `-dm`, a yaml of target item name: golden item name.
    jobs: `-j`, parallel workers: processes for the ranks of a folder, threads for tensor files (default: cores).

    Two MindSpore kernel dumps (static graph, level L2) give kernel_compare's KernelCompareResult.

    Returns a CompareResult (rows, summary, per-rank results, to_pandas(), write()). A folder's pair that fails
    is listed in result.failures while the others are compared; MsprobeError (PathError, DumpFormatError,
    UsageError) when nothing can be compared."""
    from msprobe.compare.kernel import is_kernel_dump
    from msprobe.compare.pipeline import compute_pair
    from msprobe.scale.task import JobFailure

    if isinstance(target, (str, os.PathLike)) and isinstance(golden, (str, os.PathLike)) and \
            is_kernel_dump(os.fspath(target)) and is_kernel_dump(os.fspath(golden)):
        return kernel_compare(target, golden)       # as the command does: every rank and step
    with _quiet() as quiet:
        options = _options(mode, fuzzy, api_mapping, cell_mapping, data_mapping, layer_mapping, jobs)
        located = _locate(target, golden)
        folders = _folders(located)
        if not folders and not located.problems:
            job = located.jobs[0]
            results: list = [compute_pair(job.target, job.golden, options, job.suffix, job.label)]
        else:
            results = _run_jobs(_compute_task, located.jobs, options, quiet, "Ranks")
        pairs, failures = [], {}
        for job, outcome in zip(located.jobs, results):
            if isinstance(outcome, JobFailure):
                failures[job.label.strip().strip("[]").strip()] = outcome.message
            else:
                pairs.append(PairResult(outcome, job))
        if not pairs:
            raise MsprobeError(f"no dump pair could be compared ({len(failures)} failed): "
                               + "; ".join(_labelled(k, v) for k, v in failures.items()))
        return CompareResult(pairs, failures, list(located.problems), folders)


class KernelCompareResult:
    """What kernel_compare found: the judged table of each (rank, step) of two MindSpore kernel dumps."""

    def __init__(self, tables: dict, problems: list[str]):
        self.tables: dict = tables
        """(rank, step) -> the judged table (msprobe.table.model.ResultTable), in rank and step order."""
        self.problems: list[str] = problems
        """Ranks and steps found on one side only (not compared)."""

    def __getitem__(self, key: tuple[int, int]):
        return self.tables[key]

    def __len__(self) -> int:
        return sum(len(table) for table in self.tables.values())

    @property
    def accuracy(self) -> dict:
        """(rank, step) -> {value of `Accuracy Reached or Not` ("Yes", "No", ..., "" when not compared): rows}."""
        from msprobe.compare.kernel import ACCURACY

        counts: dict = {}
        for key, table in self.tables.items():
            for value in table.cells[ACCURACY]:
                counts.setdefault(key, {})[value] = counts.get(key, {}).get(value, 0) + 1
        return counts

    def to_pandas(self) -> pandas.DataFrame:
        """Every table as one DataFrame, after a `Rank` and a `Step` column; metrics and statistics as float64."""
        pandas = _import_pandas()
        frames = []
        for (rank, step), table in self.tables.items():
            frame = _data_frame(table.columns, table.cells, frozenset(table.numeric_columns))
            frame.insert(0, "Step", step)
            frame.insert(0, RANK_COLUMN, rank)
            frames.append(frame)
        return pandas.concat(frames, ignore_index=True)

    def write(self, output_dir: str | os.PathLike[str], format: str = "xlsx") -> list[str]:
        """Write `compare_result_{rank}_{step}_{stamp}.xlsx|csv` per table, as the command does; their paths."""
        from msprobe.compare.kernel import ACCURACY
        from msprobe.compare.pipeline import write_table
        from msprobe.dump.paths import prepare_output_dir
        from msprobe.scale.stamp import claimed_stamp
        from msprobe.table.xlsx_writer import ACCURACY_FILLS

        if format not in ("xlsx", "csv"):
            raise UsageError(f"format must be xlsx or csv, got {format!r}.")
        written = []
        with _quiet():
            directory = prepare_output_dir(os.fspath(output_dir))
            with claimed_stamp([directory]) as stamp:
                for (rank, step), table in self.tables.items():
                    path = os.path.join(directory, f"compare_result_{rank}_{step}_{stamp}.{format}")
                    write_table(table, path, ACCURACY, ACCURACY_FILLS)
                    written.append(path)
        return written

    def __repr__(self) -> str:
        parts = [f"rank {r} step {s}: {len(t)} rows" for (r, s), t in self.tables.items()]
        return f"<KernelCompareResult {'; '.join(parts)}>"


def kernel_compare(target: str | os.PathLike[str], golden: str | os.PathLike[str], *,
                   ranks: Sequence[int] | None = None, steps: Sequence[int] | None = None) -> KernelCompareResult:
    """Compare two MindSpore kernel dumps (static graph, level L2: .npy files or statistic.csv under
    rank_<id>/<net>/<graph>/<step>), as `msprobe compare -tp target -gp golden --rank R --step S` does, writing
    nothing. ranks, steps: the ranks and steps to compare (default: all found on both sides)."""
    from msprobe.compare.kernel import build_kernel_table, kernel_pairs
    from msprobe.dump.paths import check_input_dir

    with _quiet():
        target = check_input_dir(os.fspath(target), "target kernel dump directory")
        golden = check_input_dir(os.fspath(golden), "golden kernel dump directory")
        pairs, problems = kernel_pairs(target, golden, list(ranks) if ranks else None, list(steps) if steps else None)
        if not pairs:
            raise MsprobeError("no (rank, step) of the kernel dumps could be paired" +
                               (": " + "; ".join(problems) if problems else "."))
        return KernelCompareResult({(pair.rank, pair.step): build_kernel_table(pair) for pair in pairs}, problems)


# ---------------------------------------------------------------------------------------------------------------
# diff_analyze


@dataclass(frozen=True)
class DivergentOp:
    """One op of the first-divergence answer (a record of diff_analyze_*.json)."""

    rank: int
    label: str                       # the rank's folder (rank1, step0/rank1); empty for a pair of files
    op_name: str
    role: str                        # origin | first large difference | received through communication | diverged later
    position: int                    # 0-based entry of the rank's dump, in execution order
    communication_layer: int         # communication ops before it
    max_output_relative_error: float  # fraction (0.05 = 5 %); 0 when no output has a numeric relative error
    inputs_differ: bool
    is_communication: bool
    group: str = ""                  # ranks of a communication op, e.g. "[0, 1, 2, 3]"
    data_info: dict = field(default_factory=dict)
    stack: list | None = None


@dataclass(frozen=True)
class DiffAnalysis:
    """Where two runs first part (`msprobe compare -da`): the first divergent op, on which rank, and how the
    divergence travels through communication ops.

    For a dump root of several steps, `steps` holds one DiffAnalysis per step (`step0`, `graph/step1`), `lines`
    (and so `str()`) every step's answer after a `step0:` line, as the command prints them, and the other fields
    are those of the first step, in step order, whose runs diverge (else of the first step)."""

    op_name: str | None              # the first divergent op; None when every compared output is identical
    rank: int | None
    ops: tuple[DivergentOp, ...]     # every record of diff_analyze_*.json, origin rank(s) first
    clean_ranks: tuple[int, ...]     # ranks without divergence
    lines: tuple[str, ...]           # the console answer of -da
    record: dict                     # the content of diff_analyze_*.json ({} when nothing diverges)
    dtype_aware: dict | None = None  # the first divergence the dtypes do not explain, when the analysis gives one
    culprit: dict | None = None      # the compare's culprit (the advisor's): op_name None when no op makes one
    next_dump: dict | None = None    # the target run's collector configuration of the next dump (-da writes it as
    #                                  next_dump_*_target.json; dump_path ./next_dump/target)
    step: str = ""
    failures: dict = field(default_factory=dict)   # label -> reason, for ranks that could not be analysed
    steps: dict = field(default_factory=dict)      # step -> DiffAnalysis, for a dump root of several steps
    next_dump_golden: dict | None = None   # the golden run's configuration (next_dump_*_golden.json; ./next_dump/golden)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _divergent_op(digest, node, role: str) -> DivergentOp:
    return DivergentOp(digest.rank, digest.label.strip().strip("[]").strip(), node.name, role, node.position,
                       node.layer, node.max_relative, node.inputs_differ, node.is_comm, node.group,
                       dict(node.data_info), list(node.stack) if node.stack is not None else None)


def _analysis_of(step: str, finding, failures: dict) -> DiffAnalysis:
    from msprobe.compare.diff_analyze import analysis_record, describe
    from msprobe.compare.next_dump import side_configs

    ops: list = []
    for digest in finding.origin:
        ops.append(_divergent_op(digest, digest.first, "origin"))
        if digest.first_large is not None and digest.first_large is not digest.first:
            ops.append(_divergent_op(digest, digest.first_large, "first large difference"))
    for digest in finding.received:
        received = digest.first.is_comm and not digest.first.inputs_differ
        ops.append(_divergent_op(digest, digest.first, "received through communication" if received
                                 else "diverged later"))
    record = analysis_record(finding) if finding.origin else {}
    dtype_aware = record.get("dtype_aware", getattr(finding, "dtype_aware", None))
    first = finding.origin[0] if finding.origin else None
    culprit = record.get("culprit")
    next_dump = finding.culprit.next_dump if finding.origin and finding.culprit is not None else None
    configs = side_configs(next_dump) if next_dump is not None else {}
    return DiffAnalysis(first.first.name if first else None, first.rank if first else None, tuple(ops),
                        tuple(d.rank for d in finding.clean), tuple(describe(finding)), record,
                        dtype_aware if isinstance(dtype_aware, dict) else None,
                        culprit if isinstance(culprit, dict) else None,
                        configs.get("target"), step, failures, next_dump_golden=configs.get("golden"))


def diff_analyze(target: str | os.PathLike[str], golden: str | os.PathLike[str], *, fuzzy: bool = False,
                 api_mapping: bool | str | os.PathLike[str] | None = None,
                 cell_mapping: bool | str | os.PathLike[str] | None = None,
                 data_mapping: str | os.PathLike[str] | None = None,
                 layer_mapping: bool | str | os.PathLike[str] | None = None,
                 jobs: int | None = None) -> DiffAnalysis:
    """The first-divergence analysis of `msprobe compare -da`, writing nothing: the first op whose outputs
    differ, on which rank, and how the divergence spreads (paths and options as in `compare`)."""
    from msprobe.compare.diff_analyze import find_origin
    from msprobe.scale.task import JobFailure

    with _quiet() as quiet:
        options = _options(None, fuzzy, api_mapping, cell_mapping, data_mapping, layer_mapping, jobs)
        located = _locate(target, golden)
        results = _run_jobs(_analyze_task, located.jobs, options, quiet, "Ranks")
        groups: dict = {}
        failures: dict = {}
        for job, outcome in zip(located.jobs, results):
            if isinstance(outcome, JobFailure):
                failures.setdefault(job.out_subdir, {})[job.label.strip().strip("[]").strip()] = outcome.message
                continue
            groups.setdefault(job.out_subdir, []).append(outcome)
        if not groups:
            raise MsprobeError("no dump pair could be analysed: " + "; ".join(
                _labelled(label, message) for found in failures.values() for label, message in found.items()))
        analyses = {step: _analysis_of(step, find_origin(digests), failures.get(step, {}))
                    for step, digests in groups.items()}
        if len(analyses) == 1:
            return next(iter(analyses.values()))
        first = next((a for a in analyses.values() if a.op_name is not None), next(iter(analyses.values())))
        lines = tuple(line for step, found in analyses.items() for line in (f"{step}:", *found.lines))
        return DiffAnalysis(first.op_name, first.rank, first.ops, first.clean_ranks, lines, first.record,
                            first.dtype_aware, first.culprit, first.next_dump, first.step, first.failures, analyses,
                            first.next_dump_golden)


# ---------------------------------------------------------------------------------------------------------------
# read_dump


class DumpEntry(NamedTuple):
    """One item of a dump (a tensor or scalar argument of an API or module call)."""

    name: str                        # e.g. Functional.linear.0.forward.output.0
    op: str                          # the call it belongs to, e.g. Functional.linear.0.forward
    state: str                       # input | output | parameters | parameters_grad | debug
    dtype: str | None
    shape: tuple | None
    requires_grad: bool | None
    max: Any                         # statistics as recorded (numbers; None or texts where not numeric)
    min: Any
    mean: Any
    norm: Any
    md5: str | None                  # the CRC-32 of an md5 dump
    data_name: str | None            # the tensor file of a tensor dump


_ENTRY_FLOATS = ("max", "min", "mean", "norm")


class DumpEntries(Sequence[DumpEntry]):
    """The items of one dump in dump order; `to_pandas()` gives them as a DataFrame."""

    def __init__(self, side):
        dump = side.dump
        self.path: str = dump.path
        self.task: str = dump.task
        self.level: str = dump.level
        self.framework: str = dump.framework
        self.has_md5: bool = side.has_md5
        """Whether the dump records md5 (CRC-32) values; `md5` is None in every entry otherwise."""
        self._items = side.items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._entry(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._entry(index)

    def __iter__(self) -> Iterator[DumpEntry]:
        return (self._entry(i) for i in range(len(self)))

    def _entry(self, i: int) -> DumpEntry:
        items = self._items
        return DumpEntry(items.name[i], items.entry_names[items.entry[i]], items.state[i], items.dtype[i],
                         _shape(items.shape[i]), _grad(items.requires_grad[i]), items.stat_max[i],
                         items.stat_min[i], items.stat_mean[i], items.stat_norm[i],
                         items.md5[i] if self.has_md5 else None,
                         None if items.data_name[i] in (None, "-1") else items.data_name[i])

    def to_pandas(self) -> pandas.DataFrame:
        """One row per entry, columns as DumpEntry's fields; max/min/mean/norm as float64 (NaN where not a
        number)."""
        pandas = _import_pandas()
        entries = list(self)
        data = {name: [getattr(e, name) for e in entries] for name in DumpEntry._fields}
        return pandas.DataFrame({name: pandas.Series(_float_column(values), dtype="float64")
                                 if name in _ENTRY_FLOATS else pandas.Series(values, dtype="object")
                                 for name, values in data.items()}, columns=list(DumpEntry._fields))

    def __repr__(self) -> str:
        return f"<DumpEntries {self.framework} {self.task} {self.level}: {len(self)} entries of {self.path}>"


def _shape(text) -> tuple | None:
    if text is None:
        return None
    import json

    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return text
    return tuple(value) if isinstance(value, list) else text


def _grad(text) -> bool | None:
    return {"True": True, "False": False}.get(text) if isinstance(text, str) else text


def read_dump(path: str | os.PathLike[str]) -> DumpEntries:
    """The entries of a dump.json or debug.json (or of the rank folder that holds one): name, call, dtype,
    shape, requires_grad, statistics, md5 and tensor file of every tensor or scalar argument, in dump order."""
    from msprobe.compare.pipeline import side_of
    from msprobe.dump.locate import dump_file_in
    from msprobe.dump.paths import check_input_file
    from msprobe.dump.reader import read_dump as read
    from msprobe.errors import PathError

    if not isinstance(path, (str, os.PathLike)):
        raise UsageError("path must be a path (str or os.PathLike).")
    path = os.fspath(path)
    with _quiet():
        if os.path.isdir(path):
            found = dump_file_in(path)
            if found is None:
                raise PathError(f"{path} holds no dump.json or debug.json.")
            path = found
        path = check_input_file(path, "dump file")
        return DumpEntries(side_of(read(path, "dump", with_stack=False)))
