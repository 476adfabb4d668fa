"""First-divergence analysis (-da): where do the two runs first part, on which rank, and how does the divergence
travel through communication ops; for a pair of files and every folder layout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass, field, replace

import numpy as np

from msprobe.compare.error_origin import INTRODUCED
from msprobe.compare.pipeline import (
    CompareOptions,
    build_table,
    dump_mode,
    judge_table,
    match_items,
    read_side,
    write_table,
)
from msprobe.compare.verdict import MSG_EXTRA_CHANGE, MSG_PARTED, describe_magnitude, scale_errors
from msprobe.dump.locate import PROC_DIR, Job
from msprobe.errors import MsprobeError
from msprobe.io import atomic_path, write_text
from msprobe.log import get_logger
from msprobe.names import printable
from msprobe.scale.stamp import timestamp
from msprobe.scale.task import JobFailure
from msprobe.table import columns as col
from msprobe.table.cells import NA
from msprobe.table.model import ResultTable

COMM_PREFIXES = ("Distributed.", "MintDistributed.", "communication.comm_func")
COLLECTIVES = frozenset({"send", "recv", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "isend",
                         "irecv", "scatter", "reduce_scatter", "_reduce_scatter_base", "_all_gather_base",
                         "all_to_all_single", "all_to_all", "all_gather_into_tensor", "reduce_scatter_tensor",
                         "send_object_list", "recv_object_list", "batch_isend_irecv"})
SKIPPED = ("Torch.empty", "Torch.fill", "Tensor.__setitem__", "Tensor.empty", "Torch.empty_like")
LARGE_RELATIVE_ERROR = 0.5       # the spec's threshold for a large difference (scale-aware relative, compare/verdict)
EXTRA_COLUMNS = ("state", "api_origin_name", "NPU P2POp op", "Bench P2POp op", "NPU P2POp peer", "Bench P2POp peer")
IGNORED_OUTPUTS = {"npu_fusion_attention": (4, 5)}
TABLE_FORMATS = ("csv", "xlsx")  # CompareOptions.output_format with which -da writes its tables as well as the json


@dataclass
class EntryDigest:
    """The digest of one entry of one rank."""

    name: str
    position: int            # execution order within the rank
    layer: int               # communication entries before it
    is_comm: bool
    differs: bool            # some output not exactly equal (md5 or statistics)
    inputs_differ: bool
    large: bool              # a flagged output's scale-aware relative error above LARGE_RELATIVE_ERROR (md5: differs)
    max_relative: float      # largest scale-aware relative error of its outputs (fraction), 0 when none numeric
    group: str = ""          # rank group of a communication op, e.g. "[0, 1, 2, 3]"
    data_info: dict = field(default_factory=dict)
    stack: list | None = None
    introduced: bool = False  # some output's Error_Origin is "introduced" (not explained by inputs or dtypes),
    # or the runs part here (the first shape difference of one framework's table: verdict.MSG_PARTED)
    parted: bool = False
    extra: bool = False       # an op the golden run does not call changes the values here (verdict.MSG_EXTRA_CHANGE)
    culprit: str = ""         # the culprit item when the entry holds the culprit row (compare/verdict.py)
    culprit_result: str = ""  # its Result


@dataclass
class RankDigest:
    label: str
    rank: int
    first: EntryDigest | None
    first_large: EntryDigest | None
    json_file: str
    entries: int
    first_introduced: EntryDigest | None = None   # the dtype-aware answer (issue 21)
    origin_judged: bool = True             # False for md5 dumps: no magnitudes, no Error_Origin
    culprit: EntryDigest | None = None     # the entry of the culprit row, the compare's verdict (issue 27)
    next_dump: dict | None = None          # what the next dump needs to know of the culprit (compare/next_dump.py)
    table_file: str = ""                   # the diff-mode table as .csv or .xlsx (--csv, --xlsx), "" when not asked


def rank_number(job: Job) -> int:
    match = re.search(r"rank(\d+)$", job.suffix)
    return int(match.group(1)) if match else 0


def analyze_job(job: Job, options: CompareOptions):
    """Diff-mode table of one rank, written as JSON (named with options.stamp); returns the rank's digest."""
    output_dir = os.path.join(options.output_dir, job.out_subdir) if job.out_subdir else options.output_dir
    try:
        if options.write_output:
            os.makedirs(output_dir, exist_ok=True)
        return _analyze(job, replace(options, output_dir=output_dir), options.stamp or timestamp())
    except MsprobeError as exc:
        return JobFailure(job.label, str(exc))


def digest_files(digest: RankDigest) -> list:
    return [path for path in (digest.json_file, digest.table_file) if path]


def _analyze(job: Job, options: CompareOptions, stamp: str) -> RankDigest:
    target_side = read_side(job.target, "target", with_stack=True, with_construct=True)
    golden_side = read_side(job.golden, "golden", with_stack=False, with_construct=True)
    mode = dump_mode(target_side, golden_side)
    table_mode = col.MD5 if mode == col.MD5 else col.STATISTICS   # tensor dumps are analysed by statistics
    t_items, g_items = target_side.items, golden_side.items
    target, golden = target_side.dump, golden_side.dump
    pairs = match_items(target, golden, t_items, g_items, options, job.label, stamp, job.suffix)
    table, judge_input = build_table(table_mode, target, golden, t_items, g_items, pairs, options, job.label)
    rows = len(table)
    cells = table.cells
    verdict = _verdict(mode, table, judge_input, target, golden, t_items, g_items, pairs, options, job.label)
    origin = verdict.origins
    if origin is not None:
        cells[col.ERROR_ORIGIN] = origin
    states = [t_items.state[i] for i in pairs.target.tolist()]
    matched = pairs.matched.tolist()
    row_differs = _row_differences(table_mode, cells, matched, rows)
    relative = None
    if table_mode == col.STATISTICS:
        relative = scale_errors(col.STATISTICS, cells)
        relative[verdict.unjudged] = 0.0         # no data, noise, a recording convention
        # large differences are named among the rows the verdict flags (warning or error) only
        flagged = np.asarray([r != "pass" for r in verdict.results], dtype=bool)
        relative = (relative, flagged)
    stacks = target.stack or {}
    json_file = table_file = ""
    table_columns = None
    if options.write_output:
        json_file = os.path.join(options.output_dir, f"compare_result{job.suffix}_{stamp}.json")
        if options.output_format in TABLE_FORMATS:
            table_file = f"{json_file[:-len('.json')]}.{options.output_format}"
            table_columns = {column: [] for column in (col.RESULT, col.ERR_MESSAGE, *EXTRA_COLUMNS)}
    # One entry is measured, written and forgotten at a time: only the nodes the answer names (first, first large,
    # first introduced, culprit) keep their
    # data_info and stack, so the memory stays that of the table (a -da run of a million rows fits as a plain
    # compare does).
    first = first_large = first_introduced = culprit_node = None
    culprit = verdict.culprit
    count = layer = 0
    entry_of_row = judge_input.entry.tolist()
    with _json_object(json_file) as writer:
        start = 0
        while start < rows:
            entry = entry_of_row[start]
            stop = start
            while stop < rows and entry_of_row[stop] == entry:
                stop += 1
            name = t_items.entry_names[entry]
            node, items = _entry_node(name, start, stop, count, layer, table_mode, cells, states, matched,
                                      row_differs, relative, stacks, t_items, g_items, pairs, table.columns,
                                      with_items=writer is not None, table_columns=table_columns)
            node.parted = any(MSG_PARTED in verdict.messages[r] for r in range(start, stop))
            node.extra = any(MSG_EXTRA_CHANGE in verdict.messages[r] for r in range(start, stop))
            node.introduced = node.parted or node.extra or (origin is not None and INTRODUCED in origin[start:stop])
            if culprit is not None and start <= culprit < stop:
                node.culprit, node.culprit_result = cells[col.NPU_NAME][culprit], verdict.results[culprit]
                culprit_node = node
            if writer is not None and (name.count(".") >= 3 or target.is_debug):
                writer.add(name, {"is_same": not node.differs, "op_items": items})
            if not name.startswith(SKIPPED):
                first = first or (node if node.differs else None)
                first_large = first_large or (node if node.large else None)
                first_introduced = first_introduced or (node if node.introduced else None)
            count += 1
            if node.is_comm:
                layer += 1
            start = stop
    if json_file:
        get_logger().info("%sSaving json file to disk: %s", job.label, json_file)
    if table_file:
        _write_da_table(table, table_columns, table_file)
        get_logger().info("%sThe result file path is: %s.", job.label, table_file)
    next_dump = None
    if culprit_node is not None:
        from msprobe.compare.next_dump import culprit_names

        golden_row = int(pairs.golden[culprit])
        golden_entry = g_items.entry_names[g_items.entry[golden_row]] if golden_row >= 0 else None
        next_dump = culprit_names(culprit_node.name, target, golden_entry, golden, job)
    return RankDigest(job.label, rank_number(job), first, first_large, json_file, count, first_introduced,
                      origin is not None, culprit_node, next_dump, table_file)


def _write_da_table(table: ResultTable, added: dict, path: str) -> None:
    """The diff-mode table as the json's rows spell it: the table's columns, its Result and Err_message as -da
    fills them, then the columns the records add (state, api_origin_name, P2P ops); stacks as in a compare table."""
    columns = [*table.columns, *(column for column in added if column not in table.columns)]
    blank = [""] * len(table)
    cells = {column: added[column] if column in added else table.cells.get(column, blank) for column in columns}
    write_table(ResultTable(columns=columns, cells=cells, numeric_columns=table.numeric_columns), path)


class _JsonMembers:
    """The members of one JSON object, written one at a time as json.dumps(<the object>, indent=4,
    ensure_ascii=False) spells them."""

    def __init__(self, handle):
        self.handle, self.count = handle, 0

    def add(self, key: str, value) -> None:
        text = json.dumps({key: value}, indent=4, ensure_ascii=False, default=str)
        self.handle.write(("{\n" if not self.count else ",\n") + text[2:-2])
        self.count += 1


@contextlib.contextmanager
def _json_object(path: str):
    """A _JsonMembers writing `path` atomically (None when path is empty: nothing is written)."""
    if not path:
        yield None
        return
    with atomic_path(path) as temporary, \
            open(temporary, "w", encoding="utf-8", errors="backslashreplace") as handle:
        members = _JsonMembers(handle)
        yield members
        handle.write("\n}" if members.count else "{}")


def _verdict(mode, table, judge_input, target, golden, t_items, g_items, pairs, options, label):
    """The compare's verdict of every row: from the statistics (or md5) table, or for real-data dumps from the
    tensors themselves (read here for this judgement only; the first divergence stays the statistics' answer)."""
    if mode == col.TENSOR:
        tensor_table, tensor_input = build_table(col.TENSOR, target, golden, t_items, g_items, pairs, options, label)
        return judge_table(tensor_table, tensor_input, target, golden, t_items, g_items, pairs, options)
    return judge_table(table, judge_input, target, golden, t_items, g_items, pairs, options)


def _row_differences(mode: str, cells: dict, matched: list, rows: int) -> list:
    if mode == col.MD5:
        return [m and a != b for m, a, b in zip(matched, cells[col.NPU_MD5], cells[col.BENCH_MD5])]
    diffs = [cells[name] for name in col.STAT_DIFFS[:4]]
    return [matched[r] and _stats_differ([d[r] for d in diffs]) for r in range(rows)]


def _stats_differ(diffs: list) -> bool:
    """A row's four statistic differences: a number other than 0 differs; `Diff` and N/A (a statistic one run does
    not record: PyTorch writes no Mean or Norm of an integer tensor, MindSpore does) count only when no statistic
    could be compared as a number."""
    numeric = [d for d in diffs if d not in ("Diff", NA)]
    return any(d != "0" for d in numeric) if numeric else "Diff" in diffs


def is_communication(name: str) -> bool:
    if not name.startswith(COMM_PREFIXES):
        return False
    parts = name.split(".")
    api = parts[2] if name.startswith("communication.comm_func") else parts[1] if len(parts) > 1 else ""
    return len(parts) > 2 and api in COLLECTIVES


def _entry_node(name, start, stop, position, layer, mode, cells, states, matched, row_differs, relative, stacks,
                t_items, g_items, pairs, columns, with_items: bool = True, table_columns: dict | None = None):
    """The digest of one entry (rows start..stop) and, with_items, its rows as records of the json file;
    table_columns (column -> list) gets the rows' values of the columns the records add to the table's."""
    api = name.split(".")[-3] if name.count(".") >= 3 else ""
    ignored = IGNORED_OUTPUTS.get(api, ())
    has_outputs = any(states[r] == "output" for r in range(start, stop))
    differs = inputs_differ = large = False
    max_relative = 0.0
    group = ""
    output_index = 0
    items = []
    data_info: dict = {"input": {}, "output": {}}
    peer_key = "NPU P2POp peer"
    for row in range(start, stop):
        state = states[row]
        is_output = state == "output" or (not has_outputs and state in ("parameters_grad", "debug"))
        if state == "output":
            skip = output_index in ignored
            output_index += 1
        else:
            skip = False
        item_name = cells[col.NPU_NAME][row]
        if item_name.endswith(".group") and cells["NPU max"][row] not in (None, NA):
            group = str(cells["NPU max"][row])
        if row_differs[row] and not skip:
            if is_output:
                differs = True
                if mode == col.MD5:
                    large = True
                elif relative[0][row] == relative[0][row]:
                    max_relative = max(max_relative, float(relative[0][row]))
                    large = large or (relative[1][row] and relative[0][row] > LARGE_RELATIVE_ERROR)
            else:
                inputs_differ = True
        if mode == col.MD5:
            info = {col.NPU_MD5: cells[col.NPU_MD5][row]}
        else:
            info = {f"NPU {s}": cells[f"NPU {s}"][row] for s in ("max", "min", "mean", "l2norm")}
        data_info["output" if is_output else "input"][item_name] = info
        extra = t_items.extra.get(int(pairs.target[row]), {})
        golden_row = int(pairs.golden[row])
        golden_extra = g_items.extra.get(golden_row, {}) if golden_row >= 0 else {}
        record = {column: cells[column][row] if column in cells else "" for column in columns}
        if col.STACK in record:
            lines = stacks.get(name)
            record[col.STACK] = lines if row == start and lines is not None else NA
        record[col.RESULT] = ("Different" if row_differs[row] else "pass") if mode == col.MD5 else ""
        record[col.ERR_MESSAGE] = "" if matched[row] else "No bench data matched."
        if matched[row] and cells["NPU Requires_grad"][row] != cells["Bench Requires_grad"][row] \
                and NA not in (cells["NPU Requires_grad"][row], cells["Bench Requires_grad"][row]):
            record[col.ERR_MESSAGE] = "Requires_grad inconsistent. "
        record.update({"state": state, "api_origin_name": name, "NPU P2POp op": str(extra.get("op")),
                       "Bench P2POp op": str(golden_extra.get("op")) if golden_row >= 0 else NA,
                       "NPU P2POp peer": str(extra.get("peer")),
                       "Bench P2POp peer": str(golden_extra.get("peer")) if golden_row >= 0 else NA})
        if mode != col.MD5:
            info[peer_key] = record[peer_key]
        if with_items:
            items.append(record)
        if table_columns is not None:
            for column, values in table_columns.items():
                values.append(record[column])
    node = EntryDigest(name, position, layer, is_communication(name), differs, inputs_differ, large, max_relative, group,
                data_info, stacks.get(name))
    return node, items


@dataclass
class Finding:
    """The answer for one group of ranks (one step)."""

    origin: list           # RankDigest of the rank(s) where the divergence starts
    received: list         # RankDigest of ranks whose first divergence came through a communication op
    clean: list            # ranks without divergence
    aware: RankDigest | None = None   # the rank of the first divergence the dtypes do not explain
    judged: bool = True               # Error_Origin was judged (not md5)
    culprit: RankDigest | None = None  # the rank of the culprit (the compare's verdict)


def _earliest(digests: list, attribute: str):
    """The digest whose node `attribute` comes first: the earliest communication layer, then position, then rank."""
    holding = [d for d in digests if getattr(d, attribute) is not None]
    return min(holding, key=lambda d: (getattr(d, attribute).layer, getattr(d, attribute).position, d.rank),
               default=None)


def find_origin(digests: list) -> Finding:
    diverged = [d for d in digests if d.first is not None]
    clean = [d for d in digests if d.first is None]
    own = [d for d in diverged if not (d.first.is_comm and not d.first.inputs_differ)]
    received = [d for d in diverged if d not in own]
    pool = own or received
    aware = _earliest(digests, "first_introduced")
    culprit = _earliest(digests, "culprit")
    judged = all(d.origin_judged for d in digests)
    if not pool:
        return Finding([], [], clean, aware, judged, culprit)
    best = min((d.first.layer, d.first.position) for d in pool)
    origin = [d for d in pool if (d.first.layer, d.first.position) == best]
    return Finding(origin, [d for d in diverged if d not in origin], clean, aware, judged, culprit)


def dtype_aware_record(finding: Finding) -> dict:
    """The first divergence that the dtypes do not explain: the first entry (in execution order, the earliest
    communication layer over ranks) with an `introduced` output; op_name null when there is none."""
    digest = finding.aware
    if digest is None:
        reason = ("every difference is within what the inputs and the dtypes' precision explain" if finding.judged
                  else "md5 dumps hold no magnitudes: Error_Origin is not judged")
        return {"op_name": None, "rank": None, "reason": reason}
    node = digest.first_introduced
    return {"op_name": node.name, "rank": digest.rank, "entry": node.position + 1,
            "communication_layer": node.layer, "max_output_relative_error": node.max_relative,
            "data_info": node.data_info, "stack_info": node.stack}


def culprit_record(finding: Finding) -> dict:
    """The culprit: the entry of the first row of the highest verdict level, an error or a warning made at its op
    (compare/verdict.py; the advisor's suspect); op_name null when no op makes one."""
    digest = finding.culprit
    if digest is None:
        return {"op_name": None, "rank": None,
                "reason": "no row is an error or a warning made at its own op (differences are carried or rounding)"}
    node = digest.culprit
    record = {"op_name": node.name, "rank": digest.rank, "entry": node.position + 1, "item": node.culprit,
              "result": node.culprit_result, "communication_layer": node.layer,
              "max_output_relative_error": node.max_relative, "data_info": node.data_info, "stack_info": node.stack}
    if digest.next_dump is not None:
        names = digest.next_dump["sides"]
        record["module"] = names[0]["module"]
        if len(names) > 1:
            record["golden_op_name"] = names[1]["api"] or names[1]["module"]
            record["golden_module"] = names[1]["module"]
    return record


def node_record(node: EntryDigest, role: str) -> dict:
    return {"op_name": node.name, "data_info": node.data_info, "stack_info": node.stack, "role": role,
            "communication_layer": node.layer, "max_output_relative_error": node.max_relative}


def write_analysis(finding: Finding, output_dir: str, table_format: str | None = None) -> str | None:
    """Write diff_analyze_<ts>.json and the next dump's configurations; log where, and the next step (whose
    compare writes its table as `table_format` "csv" or the default .xlsx)."""
    logger = get_logger()
    if not finding.origin:
        logger.info("Cannot find any diff node, no need to generate analyze file.")
        return None
    result = analysis_record(finding)
    stamp = f"{time.strftime('%Y%m%d%H%M%S')}_{time.time_ns() % 10**9:09d}"
    path = os.path.join(output_dir, f"diff_analyze_{stamp}.json")
    configs = _write_next_dump(finding, os.path.join(output_dir, f"next_dump_{stamp}"))
    if configs:
        result["culprit"]["next_dump_config"] = configs["target"]
        result["culprit"]["next_dump_golden_config"] = configs["golden"]
    write_text(path, json.dumps(result, indent=2, ensure_ascii=False, default=str))
    logger.info("The analyze result is saved in: %s", path)
    if configs:
        from msprobe.compare.next_dump import compare_command, what

        info = finding.culprit.next_dump
        logger.info("Next step: dump the real tensors of %s only, each run into its own folder (%s):\n"
                    "  target run: PrecisionDebugger(config_path=%r)\n"
                    "  golden run: PrecisionDebugger(config_path=%r)\n"
                    "  then:       %s\n"
                    "  (`msprobe triage --target CMD --golden CMD` runs the dumps and the compare for you)",
                    what(info), _next_dump_root(output_dir), configs["target"], configs["golden"],
                    compare_command(info, _next_dump_root(output_dir), os.path.join(output_dir, "next_compare"),
                                    table_format))
    return path


def _next_dump_root(output_dir: str) -> str:
    """Where the next dumps go: `next_dump/target` and `next_dump/golden` in -da's output folder (absolute, so the
    printed compare is exact wherever the runs start)."""
    return os.path.join(os.path.abspath(output_dir), "next_dump")


def _write_next_dump(finding: Finding, stem: str) -> dict | None:
    """The collector configurations of the next dump, one per run (compare/next_dump.py), when there is a
    culprit: {"target": path, "golden": path}."""
    if finding.culprit is None or finding.culprit.next_dump is None:
        return None
    from msprobe.compare.next_dump import write_configs

    return write_configs(finding.culprit.next_dump, stem, _next_dump_root(os.path.dirname(stem)))


def record_key(digest: RankDigest) -> str:
    """A rank's key in diff_analyze_*.json: `rank_<n>`, or for a single-process dump its `proc<pid>` folder, the
    name the console and the result files give it."""
    folder = digest.label.strip("[] ").rsplit("/", 1)[-1]
    return folder if PROC_DIR.match(folder) else f"rank_{digest.rank}"


def analysis_record(finding: Finding) -> dict:
    """The content of diff_analyze_*.json: per rank, its divergent ops with their roles ({} without divergence)."""
    result: dict = {}
    for digest in finding.origin:
        result[record_key(digest)] = [node_record(digest.first, "origin")]
        if digest.first_large is not None and digest.first_large is not digest.first:
            result[record_key(digest)].append(node_record(digest.first_large, "first large difference"))
    for digest in finding.received:
        role = ("received through communication" if digest.first.is_comm and not digest.first.inputs_differ
                else "diverged later")
        result.setdefault(record_key(digest), []).append(node_record(digest.first, role))
    result["dtype_aware"] = dtype_aware_record(finding)
    result["culprit"] = culprit_record(finding)
    return result


def rank_name(digest: RankDigest) -> str:
    """How the console names a rank: its folder when that is `rank<N>` or `proc<pid>`, else `rank <N>` (a pair of
    files, a single process's `rank` folder without an id, a step folder holding the dump itself), as
    diff_analyze_*.json keys it."""
    folder = digest.label.strip("[] ").rsplit("/", 1)[-1]
    return folder if re.fullmatch(r"rank\d+", folder) or PROC_DIR.match(folder) else f"rank {digest.rank}"


def describe(finding: Finding) -> list:
    """Console lines that answer: where do the runs first part, by how much, and how did it spread. Names from
    the dumps are shown with their control characters escaped (names.printable)."""
    lines = []
    if not finding.origin:
        return ["No divergence found: every compared output is identical (statistics or md5)."]
    for digest in finding.origin:
        node = digest.first
        rank = rank_name(digest)
        how = (f"max relative error of its outputs {describe_magnitude(node.max_relative)}" if node.max_relative
               else "outputs differ (md5 or statistics not identical)")
        cause = "its inputs already differ" if node.inputs_differ else "its inputs are identical"
        lines.append(f"Divergence starts on {rank} at {node.name} (entry {node.position + 1}, after "
                     f"{node.layer} communication ops): {how}; {cause}.")
        large = digest.first_large
        if large is not None and large is not node:
            lines.append(f"  First difference above {LARGE_RELATIVE_ERROR:g} (scale-aware relative error) on {rank}: "
                         f"{large.name} (entry {large.position + 1}, {describe_magnitude(large.max_relative)}).")
    for digest in finding.received:
        node = digest.first
        rank = rank_name(digest)
        if node.is_comm and not node.inputs_differ:
            lines.append(f"{rank} receives the divergence through {node.name}"
                         f"{' (group ' + node.group + ')' if node.group else ''}.")
        else:
            lines.append(f"{rank} diverges later at {node.name} (after {node.layer} communication ops).")
    for digest in finding.clean:
        lines.append(f"{rank_name(digest)}: no divergence.")
    lines.append(dtype_aware_line(finding))
    lines.append(culprit_line(finding))
    return [printable(line) for line in lines]


def _where(digest: RankDigest, node: EntryDigest) -> str:
    """`<entry> on <rank> (entry <position>)`."""
    return f"{node.name} on {rank_name(digest)} (entry {node.position + 1})"


def culprit_line(finding: Finding) -> str:
    if finding.culprit is None:
        return ("Culprit: none - no row is an error or a warning made at its own op (every difference is carried "
                "from its inputs or within the dtypes' rounding).")
    node = finding.culprit.culprit
    return (f"Culprit (the compare's verdict, as the advisor's): {_where(finding.culprit, node)}, row {node.culprit}: "
            f"{node.culprit_result}.")


def dtype_aware_line(finding: Finding) -> str:
    digest = finding.aware
    if digest is None:
        if not finding.judged:
            return "Dtype-aware: not judged (md5 dumps hold no magnitudes)."
        return ("Dtype-aware: no op introduces error beyond what its inputs and the dtypes' precision explain "
                "(every difference is dtype rounding or carried from upstream).")
    node = digest.first_introduced
    because = ("the two runs' tensors differ in shape from here on: the runs call different ops here, or one run "
               "makes an extra call that shifts the call counts (try -fm)" if node.parted
               else "an op the golden run does not call changes the values the golden passes on unchanged"
               if node.extra else "its output error exceeds what its inputs and dtypes explain")
    return f"Dtype-aware: first divergence not explained by the dtypes: {_where(digest, node)}: {because}."
