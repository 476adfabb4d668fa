"""One graph job: the build or compare of one rank, in one process, top-down: read the dumps, flatten them (the
compare core's items), build the trees, pair them, compare the items, score the nodes, write the .vis (or the rows
of the .vis.db, which the driver writes for every rank at once). Parallelism is the executor's: it runs the jobs of a
batch (ranks and steps) in worker processes or Ray tasks."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from msprobe.compare.mapping import MappingOptions
from msprobe.compare.pipeline import CompareOptions, compare_dumps, match_items, side_of
from msprobe.dump.locate import Job
from msprobe.dump.reader import read_dump
from msprobe.errors import DumpFormatError, MsprobeError
from msprobe.graph import match, scoring, vis_json
from msprobe.graph.distributed import comm_nodes
from msprobe.graph.params import entry_params
from msprobe.graph.scoring import columns_used
from msprobe.graph.tree import build_graph
from msprobe.log import get_logger
from msprobe.table import columns as col


@dataclass(frozen=True)
class GraphOptions:
    output_dir: str
    compare: bool
    output_format: str = "json"        # "json" (.vis) | "db" (.vis.db)
    fuzzy: bool = False
    layer_mapping: str | None = None   # None off, "" structural, else yaml
    overflow_check: bool = False
    complete_stack: bool = False
    tensor_log: bool = False
    jobs: int = 2
    stamp: str = ""


@dataclass
class GraphResult:
    label: str
    mode: str
    step: int
    rank: int
    npu_nodes: int
    bench_nodes: int = 0
    matched: int = 0
    unmatched: int = 0
    bench_unmatched: int = 0
    overflow: int = 0
    top: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    output: str | None = None
    rows: tuple | None = None          # db format: (node rows, stack rows) per graph, written by the caller
    config: dict = field(default_factory=dict)
    comm: dict = field(default_factory=dict)        # "NPU"/"Bench" -> [CommNode] (distributed.py)
    comm_ends: list = field(default_factory=list)   # .vis: where matched_distributed goes (vis_json.add_links)
    linked: bool = False                            # .vis: matched_distributed written


def graph_job(job: Job, options: GraphOptions) -> GraphResult:
    """The job's GraphResult. Its errors become the executor's JobFailure (scale/executor.execute), which tries
    again only failures that may pass on a second attempt."""
    import orjson

    try:
        return _graph_job(job, options)
    except (UnicodeEncodeError, orjson.JSONEncodeError):     # text that UTF-8 cannot hold
        where = _lone_surrogate(job.target, job.golden if options.compare else None)
        if where is None:
            raise
        raise DumpFormatError(f"{where} holds a lone UTF-16 surrogate (an escape such as \\ud800 without its "
                              "pair) in a name, value or stack; such text cannot be written to a graph file "
                              "(UTF-8). Remove it from the dump.") from None


def _graph_job(job: Job, options: GraphOptions) -> GraphResult:
    step, rank = step_rank(job)
    simplify = not options.complete_stack and options.output_format == "json"     # a .vis.db keeps stacks whole
    target, npu = read_graph(job.target, "target", simplify)
    result = GraphResult(job.label, "", step, rank, len(npu.nodes), warnings=list(npu.warnings))
    if not options.compare:
        result.mode = col.MD5 if target.has_md5 else col.STATISTICS if target.dump.task == "statistics" else col.TENSOR
        if options.overflow_check:
            result.overflow = scoring.overflow_levels(npu)
        return _write(result, job, options, npu, None)
    golden, bench = read_graph(job.golden, "golden", simplify)
    result.warnings += [f"golden: {w}" for w in bench.warnings]
    layer, same_framework = _layer_mapping(options.layer_mapping, target.dump.framework, golden.dump.framework)
    if same_framework:
        result.warnings.append("-lm maps the names of a MindSpore target to a PyTorch golden; both dumps are "
                               f"{target.dump.framework} dumps, so nodes are paired by name.")
    # the compare core maps names only across frameworks (-lm of one framework pairs the nodes by name)
    cells, mode, entry_map = _compare(target, golden, options, None if same_framework else layer, job.label)
    del target, golden
    _pair(npu, bench, options, layer, entry_map)
    db = options.output_format == "db"
    result.mode = mode
    scoring.attach_and_score(npu, cells, mode, db)
    del cells
    if options.overflow_check:
        result.overflow = scoring.overflow_levels(npu)
    result.bench_nodes = len(bench.nodes)
    result.matched = sum(1 for n in npu.nodes.values() if n.link)
    result.unmatched = len(npu.nodes) - result.matched
    result.bench_unmatched = sum(1 for n in bench.nodes.values() if not n.link)
    result.top = scoring.top_nodes(npu, mode, db)
    get_logger().info("%sGraph compare mode: %s; %d of %d NPU nodes matched.", job.label,
                      "real data" if mode == col.TENSOR else mode, result.matched, len(npu.nodes))
    return _write(result, job, options, npu, bench)


def read_graph(path: str, role: str, simplify_stacks: bool = True) -> tuple:
    """(the dump read with its stack and construct as a compare side, its tree). The dump is walked once: the
    compare core's items (flatten) give the nodes their parameters."""
    from dataclasses import replace


    dump = read_dump(path, role, with_stack=True, with_construct=True)
    side = side_of(dump, records=True)      # side_of releases the parsed data of its copy of the dump; the tree needs it
    graph = build_graph(dump, entry_params(side.items, dump.path), simplify_stacks)
    side.items.record = []    # the nodes have their parameters: the parsed leaves can go
    # the compare core would give the target's rows their stacks, which the graph does not show
    return replace(side, dump=replace(dump, data={}, stack=None)), graph


def _compare(target, golden, options: GraphOptions, layer, label: str) -> tuple:
    """(the compare columns the graph uses, the compare mode, with -lm the entry map of the pairs: NPU entry name ->
    Bench entry name) of the two sides, by the compare core."""
    compare_options = CompareOptions(output_dir=options.output_dir, tensor_log=options.tensor_log,
                                     compare_only=True, fuzzy=options.fuzzy, mapping=MappingOptions(layer=layer),
                                     jobs=options.jobs, write_output=False, stat_numbers=True)
    table, summary = compare_dumps(target, golden, compare_options, label, options.stamp)
    entry_map: dict = {}
    if layer is not None:
        t_items, g_items = target.items, golden.items
        pairs = match_items(target.dump, golden.dump, t_items, g_items, compare_options, label, options.stamp)
        for t, g in zip(pairs.target.tolist(), pairs.golden.tolist()):
            if g >= 0:
                entry_map.setdefault(t_items.entry_names[t_items.entry[t]], g_items.entry_names[g_items.entry[g]])
    used = columns_used(summary.mode, options.output_format == "db")
    return {c: table.cells[c] for c in used if c in table.cells}, summary.mode, entry_map


def _pair(npu, bench, options: GraphOptions, layer, entry_map: dict) -> None:
    """Pair the nodes of the two trees (spec §6): through the -lm entry map, by -fm's fuzzy rules or exactly."""
    if layer is not None:
        match.match_graphs_mapped(npu, bench, entry_map)
    elif options.fuzzy:
        match.match_graphs_fuzzy(npu, bench)
    else:
        match.match_graphs_exact(npu, bench)


def _layer_mapping(layer: str | None, target_framework: str, golden_framework: str) -> tuple:
    """(layer mapping for the graph's matching, whether -lm was given for two dumps of one framework). -lm pairs a
    MindSpore target with a PyTorch golden; two dumps of one framework pair by name."""
    if target_framework != golden_framework and layer is None:
        raise MsprobeError(f"The target is a {target_framework} dump and the golden a {golden_framework} dump; "
                           "a cross-framework graph compare needs -lm.")
    if layer is not None and target_framework == golden_framework:
        return "", True
    return layer, False


def _write(result: GraphResult, job: Job, options: GraphOptions, npu, bench) -> GraphResult:
    """Write the .vis (or keep the .vis.db rows in the result); the communication nodes go into the result for
    the links between ranks."""
    for label, graph in (("NPU", npu), ("Bench", bench)):
        found = comm_nodes(graph, options.overflow_check) if graph is not None else []
        if found:
            result.comm[label] = found
    if options.output_format == "db":
        from msprobe.graph.vis_db import graph_rows

        keep_md5 = result.mode == col.MD5
        rows, stacks = graph_rows(npu, "NPU", result.step, result.rank, keep_md5)
        if bench is not None:
            more_rows, more_stacks = graph_rows(bench, "Bench", result.step, result.rank, keep_md5)
            rows += more_rows
            stacks += more_stacks
        result.rows = (rows, stacks)
        result.config = {"micro_steps": max(npu.micro_steps, bench.micro_steps if bench else 1)}
        return result

    path = os.path.join(options.output_dir, file_name(job, options))
    if bench is None:
        ends = vis_json.write_build(npu, path, options.overflow_check)
    else:
        ends = vis_json.write_compare(npu, bench, path, scoring.TASK[result.mode], scoring.TOOLTIPS[result.mode],
                                      scoring.colors(result.mode, False), options.overflow_check)
    result.output = path
    result.comm_ends = ends if result.comm else []
    return result


def step_rank(job: Job) -> tuple[int, int]:
    step = re.search(r"step(\d+)$", job.out_subdir or "")
    rank = re.fullmatch(r"_rank(\d+)", job.suffix or "")
    return (int(step.group(1)) if step else 0), (int(rank.group(1)) if rank else 0)


def file_name(job: Job, options: GraphOptions) -> str:
    kind = "compare" if options.compare else "build"
    step = ("_" + job.out_subdir.replace("/", "_")) if job.out_subdir else ""
    return f"{kind}{step}{job.suffix}_{options.stamp}.vis"


# \uD800-\uDBFF not followed by \uDC00-\uDFFF, or \uDC00-\uDFFF not preceded by \uD800-\uDBFF
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
                             rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _lone_surrogate(*dumps) -> str | None:
    """The first file of the dumps (dump.json paths or folders) whose JSON escapes a lone surrogate."""
    for dump in filter(None, dumps):
        folder = dump if os.path.isdir(dump) else os.path.dirname(dump)
        for name in ("dump.json", "construct.json", "stack.json"):
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as handle:
                    if _LONE_SURROGATE.search(handle.read()):
                        return path
            except OSError:
                continue
    return None
