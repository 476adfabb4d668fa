"""One graph job (build or compare of one rank), run in the main process or a worker process."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

from msprobe.dump.locate import Job
from msprobe.errors import MsprobeError
from msprobe.graph.forked import Forked
from msprobe.scale.task import JobFailure


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


def step_rank(job: Job) -> tuple[int, int]:
    step = re.search(r"step(\d+)$", job.out_subdir or "")
    rank = re.fullmatch(r"_rank(\d+)", job.suffix or "")
    return (int(step.group(1)) if step else 0), (int(rank.group(1)) if rank else 0)


def file_name(job: Job, options: GraphOptions) -> str:
    kind = "compare" if options.compare else "build"
    step = ("_" + job.out_subdir.replace("/", "_")) if job.out_subdir else ""
    return f"{kind}{step}{job.suffix}_{options.stamp}.vis"


# The trees of the last job in a process that ends without freeing its heap (the console script), released when
# the next job starts: freeing a large graph object by object takes a tenth of a second that nobody needs.
_RETIRED: list = []


def _retire(*trees) -> None:
    from msprobe.exiting import leaves_without_teardown

    if leaves_without_teardown():
        _RETIRED.extend(trees)


def graph_job(job: Job, options: GraphOptions):
    _RETIRED.clear()
    try:
        return _graph_job(job, options)
    except MsprobeError as exc:
        return JobFailure(job.label, str(exc))
    except OSError as exc:
        return JobFailure(job.label, f"{exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".strip(": "))


def forks(options: GraphOptions) -> bool:
    """Whether a graph job may fork a helper process: when it has two cores of its own. The executor gives a task
    -j divided by the tasks running beside it (one on Ray), so other ranks keep the cores busy otherwise."""
    return options.jobs >= 2


def _graph_job(job: Job, options: GraphOptions) -> GraphResult:
    from msprobe.compare import columns as col
    from msprobe.dump.flatten import entry_has_md5
    from msprobe.dump.reader import read_dump
    from msprobe.graph import scoring
    from msprobe.graph.tree import build_graph

    simplify = not options.complete_stack
    target = read_dump(job.target, "target", with_stack=True, with_construct=True)
    step, rank = step_rank(job)
    if not options.compare:
        npu = build_graph(target, simplify)
        result = GraphResult(job.label, "", step, rank, len(npu.nodes), warnings=list(npu.warnings))
        keep_md5 = any(entry_has_md5(body) for body in target.data.values())
        result.mode = col.MD5 if keep_md5 else col.STATISTICS if target.task == "statistics" else col.TENSOR
        if options.overflow_check:
            result.overflow = scoring.overflow_levels(npu)
        _retire(npu)
        return _write(result, job, options, npu, None, keep_md5)
    new = options.output_format == "db"
    # the compare core runs in a forked child (which reads the golden dump itself) while this process reads the
    # golden dump too and builds and matches the two trees; without fork, one after the other on one reading
    golden = None if forks(options) else read_dump(job.golden, "golden", with_stack=True, with_construct=True)
    compare = Forked(_compare_cells, target, golden or job.golden, options, job.label, inline=not forks(options))
    bench_part = None
    try:
        if golden is None:
            golden = read_dump(job.golden, "golden", with_stack=True, with_construct=True)
        layer, same_framework = _layer_mapping(options.layer_mapping, target.framework, golden.framework)
        framework = target.framework
        npu = build_graph(target, simplify)
        bench = build_graph(golden, simplify)
        _retire(npu, bench)
        del target, golden
        result = GraphResult(job.label, "", step, rank, len(npu.nodes), warnings=list(npu.warnings))
        result.warnings += [f"golden: {w}" for w in bench.warnings]
        if same_framework:
            result.warnings.append("-lm maps the names of a MindSpore target to a PyTorch golden; both dumps are "
                                   f"{framework} dumps, so nodes are paired by name.")
        if layer is None and options.fuzzy:
            from msprobe.graph.match import match_fuzzy

            match_fuzzy(npu, bench)
        elif layer is None:
            from msprobe.graph.match import match_exact

            match_exact(npu, bench)
        if layer is None and not new and forks(options):
            # the Bench graph is complete once matched: a child formats it while the compare core finishes
            from msprobe.graph.vis_json import graph_part

            bench_part = graph_part("Bench", bench, os.path.join(options.output_dir, file_name(job, options)))
            bench_part.start()
        return _compared(result, job, options, npu, bench, compare, layer, bench_part)
    finally:
        compare.cancel()
        if bench_part is not None:
            bench_part.close()


def _compared(result: GraphResult, job: Job, options: GraphOptions, npu, bench, compare: Forked, layer,
              bench_part) -> GraphResult:
    """Attach the compare core's cells (compare: the running _compare_cells) to the matched trees, score, and
    write."""
    from msprobe.compare import columns as col
    from msprobe.graph import scoring
    from msprobe.log import get_logger

    cells, mode, entry_map = compare.result()
    new = options.output_format == "db"
    result.mode = mode
    if layer is not None:
        from msprobe.graph.match import match_mapped

        match_mapped(npu, bench, entry_map)
    scoring.attach_and_score(npu, cells, mode, new)
    del cells
    if options.overflow_check:
        result.overflow = scoring.overflow_levels(npu)
    result.bench_nodes = len(bench.nodes)
    result.matched = sum(1 for n in npu.nodes.values() if n.link)
    result.unmatched = len(npu.nodes) - result.matched
    result.bench_unmatched = sum(1 for n in bench.nodes.values() if not n.link)
    result.top = scoring.top_nodes(npu, mode, new)
    get_logger().info("%sGraph compare mode: %s; %d of %d NPU nodes matched.", job.label,
                      "real data" if mode == col.TENSOR else mode, result.matched, len(npu.nodes))
    return _write(result, job, options, npu, bench, mode == col.MD5, bench_part)


def _layer_mapping(layer: str | None, target_framework: str, golden_framework: str) -> tuple:
    """(layer mapping for the graph's matching, whether -lm was given for two dumps of one framework). -lm pairs a
    MindSpore target with a PyTorch golden; two dumps of one framework pair by name."""
    if target_framework != golden_framework and layer is None:
        raise MsprobeError(f"The target is a {target_framework} dump and the golden a {golden_framework} dump; "
                           "a cross-framework graph compare needs -lm.")
    if layer is not None and target_framework == golden_framework:
        return "", True
    return layer, False


def _compare_cells(target, golden, options: GraphOptions, label: str):
    """(the compare columns the graph uses, compare mode, entry map of -lm) of the read target dump and the golden
    dump (read, or its dump.json path)."""
    from msprobe.compare.pipeline import side_of
    from msprobe.dump.reader import read_dump
    from msprobe.graph.scoring import columns_used

    if isinstance(golden, str):     # the compare core reads no golden stack, and its modules only to pair by them
        golden = read_dump(golden, "golden", with_stack=False,
                           with_construct=options.fuzzy or options.layer_mapping is not None)
    layer, same_framework = _layer_mapping(options.layer_mapping, target.framework, golden.framework)
    options = replace(options, layer_mapping=None if same_framework else layer)
    table, summary, entry_map = _compare(side_of(target), side_of(golden), options, label)
    used = columns_used(summary.mode, options.output_format == "db")
    return {c: table.cells[c] for c in used if c in table.cells}, summary.mode, entry_map


def _compare(t_side, g_side, options: GraphOptions, label: str):
    """The compare core's judged table of the two dumps (and, with -lm, the entry map of its pairs)."""
    from msprobe.compare.mapping import MappingOptions
    from msprobe.compare.pipeline import CompareOptions, compare_dumps, match_items

    compare_options = CompareOptions(output_dir=options.output_dir, tensor_log=options.tensor_log,
                                     compare_only=True, fuzzy=options.fuzzy,
                                     mapping=MappingOptions(layer=options.layer_mapping), jobs=options.jobs,
                                     write_output=False, stat_numbers=True)
    table, summary = compare_dumps(t_side, g_side, compare_options, label, options.stamp)
    entry_map: dict = {}
    if options.layer_mapping is not None:
        t_items, g_items = t_side.items, g_side.items
        pairs = match_items(t_side.dump, g_side.dump, t_items, g_items, compare_options, label, options.stamp)
        for t, g in zip(pairs.target.tolist(), pairs.golden.tolist()):
            if g >= 0:
                entry_map.setdefault(t_items.entry_names[t_items.entry[t]], g_items.entry_names[g_items.entry[g]])
    return table, summary, entry_map


def _write(result: GraphResult, job: Job, options: GraphOptions, npu, bench, keep_md5: bool,
           bench_part=None) -> GraphResult:
    from msprobe.graph import scoring
    from msprobe.graph.distributed import comm_nodes

    for label, graph in (("NPU", npu), ("Bench", bench)):
        found = comm_nodes(graph, options.overflow_check) if graph is not None else []
        if found:
            result.comm[label] = found
    new = options.output_format == "db"
    if new:
        from msprobe.graph.vis_db import graph_rows

        other = Forked(graph_rows, bench, "Bench", result.step, result.rank, keep_md5, inline=not forks(options)) \
            if bench is not None else None
        try:
            rows, stacks = graph_rows(npu, "NPU", result.step, result.rank, keep_md5)
            if other is not None:
                more_rows, more_stacks = other.result()
                rows += more_rows
                stacks += more_stacks
        finally:
            if other is not None:
                other.cancel()
        result.rows = (rows, stacks)
        result.config = {"micro_steps": max(npu.micro_steps, bench.micro_steps if bench else 1)}
        return result
    from msprobe.graph import vis_json

    path = os.path.join(options.output_dir, file_name(job, options))
    if bench is None:
        ends = vis_json.write_build(npu, path, options.overflow_check, forks(options))
    else:
        ends = vis_json.write_compare(npu, bench, path, scoring.TASK[result.mode], scoring.TOOLTIPS[result.mode],
                                      scoring.colors(result.mode, False), options.overflow_check, forks(options),
                                      bench_part)
    result.output = path
    result.comm_ends = ends if result.comm else []
    return result
