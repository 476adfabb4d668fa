"""`msprobe graph` (alias `graph_visualize`): hierarchical model graphs built from dumps, optionally compared,
written for the tb-graph-ascend TensorBoard plugin."""

from __future__ import annotations

import argparse
import json
import os

from msprobe.cli.arguments import int_at_least

DESCRIPTION = ("Build the module/API hierarchy of a dump (dump.json + stack.json + construct.json of an L0 or mix "
               "dump) and, with -gp, match it against a golden dump and colour every node by its precision. "
               "The output is a .vis file (JSON) per rank, or with --format db one .vis.db (SQLite) for all "
               "steps and ranks; view it with `tensorboard --logdir <output dir>` and the tb-graph-ascend plugin.")
EPILOG = """examples:
  msprobe graph -tp target/step0/rank0 -o out                      build: out/build_<ts>.vis
  msprobe graph -tp target/step0/rank0 -gp golden/step0/rank0 -o out   compare: out/compare_<ts>.vis
  msprobe graph -tp target/step0 -gp golden/step0 -o out          ranks: compare_step0... / compare_rank<N>_<ts>.vis
  msprobe graph -tp target -gp golden -o out --format db          steps and ranks in one compare_<ts>.vis.db
  msprobe -f pytorch graph -i compare.json -o out                  the 1.x form (npu_path, bench_path)
  msprobe graph -tp /shared/npu -gp /shared/gpu -o /shared/out --backend ray   one Ray task per rank; re-run resumes
  tensorboard --logdir out                                          then open http://localhost:6006/#graph_ascend

See docs/graph.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-tp", "--target_path", required=True, metavar="DIR",
                        help="target (NPU) dump folder: a rank folder, a step folder of ranks or a dump root of steps")
    parser.add_argument("-gp", "--golden_path", metavar="DIR", help="golden (bench) dump folder: compare mode")
    parser.add_argument("-o", "--output_path", required=True, metavar="DIR", help="output directory (created)")
    parser.add_argument("-lm", "--layer_mapping", nargs="?", const="", default=None, metavar="YAML",
                        help="pair nodes through the layer mapping (yaml of layer names; bare flag: structure only)")
    parser.add_argument("-oc", "--overflow_check", action="store_true",
                        help="mark nodes with inf/nan or numeric jumps (medium/high/critical)")
    parser.add_argument("-fm", "--fuzzy_match", action="store_true",
                        help="match modules by name and their APIs by name and order, ignoring call counts")
    parser.add_argument("-cs", "--complete_stack", action="store_true",
                        help="keep the complete call stacks in the .vis (default: the one line that matters)")
    parser.add_argument("-tensor_log", "--is_print_compare_log", dest="tensor_log", action="store_true",
                        help="one log line per compared tensor (real-data dumps)")
    parser.add_argument("-progress_log", "--is_print_progress_log", dest="progress_log", action="store_true",
                        help="accepted for 26.x compatibility; progress is always logged")
    parser.add_argument("--format", "--file_type", dest="format", choices=("json", "db"), default="json",
                        help="json: one .vis per graph (default, read by tb-graph-ascend); db: one .vis.db")
    parser.add_argument("-j", "--jobs", type=int_at_least(1), default=os.cpu_count() or 1, metavar="N",
                        help="ranks built in parallel processes (default: number of cores)")
    from msprobe.scale.options import add_arguments as scale_arguments

    scale_arguments(parser, "-j")


def run(args: argparse.Namespace) -> int:
    from msprobe.cli.compare import banner
    from msprobe.compare.batch import JobFailure, run_batch
    from msprobe.dump.locate import locate
    from msprobe.dump.paths import check_input_dir, prepare_output_dir
    from msprobe.errors import MsprobeError
    from msprobe.graph.run import GraphOptions, graph_job
    from msprobe.log import get_logger
    from msprobe.scale.options import backend_of

    logger = get_logger()
    backend = backend_of(args, args.jobs)
    compare = args.golden_path is not None
    target = check_input_dir(args.target_path, "target directory")
    golden = check_input_dir(args.golden_path, "golden directory") if compare else target
    located = locate(target, golden)
    if located.problems:
        what = "the target and golden dumps do not hold the same steps and ranks" if compare else \
            "the target folder is not a dump folder"
        raise MsprobeError(f"{what}: " + "; ".join(located.problems))
    if args.layer_mapping:
        from msprobe.dump.paths import check_input_file

        check_input_file(args.layer_mapping, "layer mapping file")
    output_dir = prepare_output_dir(args.output_path)
    options = GraphOptions(output_dir=output_dir, compare=compare, output_format=args.format,
                           fuzzy=args.fuzzy_match, layer_mapping=args.layer_mapping,
                           overflow_check=args.overflow_check, complete_stack=args.complete_stack,
                           tensor_log=args.tensor_log, jobs=args.jobs)
    logger.info("Please check whether the input data belongs to you. If not, there may be security risks.")
    logger.info("%s %d graph(s) ...", "Comparing" if compare else "Building", len(located.jobs))
    # .vis files are per rank and so resumable; the one .vis.db is assembled by this process from every rank
    batch, options = run_batch(located.jobs, options, backend, graph_job, "graph", vis_files, desc="Graphs",
                               resumable=args.format == "json")
    results = batch.results
    failures = [r for r in results if isinstance(r, JobFailure)]
    done = [r for r in results if not isinstance(r, JobFailure)]
    if not done and len(failures) == 1:
        raise MsprobeError(failures[0].message)         # one line
    for failure in failures:
        logger.error("%s%s", failure.label, failure.message)
    if not done:
        raise MsprobeError(f"no graph could be built ({len(failures)} failed).")
    _link_ranks(batch, args.format == "db", logger)
    if args.format == "db":
        _write_db(done, options)
    _print_summary(logger, done, compare)
    if failures:
        logger.warning("%d of %d graphs failed; see the errors above.", len(failures), len(results))
        banner(logger, "msprobe graph ends with errors.")
        return 1
    banner(logger, "msprobe graph ends successfully.")
    return 0


def _link_ranks(batch, db: bool, logger) -> None:
    """matched_distributed between the communication nodes of the ranks of each step (spec §10); a .vis that
    receives links gets its completion marker written again (its size changed; it is final now)."""
    from msprobe.compare.batch import JobFailure
    from msprobe.graph.distributed import link_results

    done = [(index, r) for index, r in enumerate(batch.results) if not isinstance(r, JobFailure)]
    count, changed = link_results([r for _, r in done], db)
    if count:
        logger.info("Communication nodes linked across ranks: %d.", count)
    for index, result in done:
        marker = batch.markers[index] if batch.markers else None
        if marker is not None and any(result is c for c in changed):
            marker.write(result)


def vis_files(result) -> list:
    """The file a graph task wrote (--format json)."""
    return [result.output]


def _write_db(done: list, options) -> None:
    from msprobe.graph import scoring
    from msprobe.graph.vis_db import write_db
    from msprobe.report.atomic import atomic_path

    kind = "compare" if options.compare else "build"
    path = os.path.join(options.output_dir, f"{kind}_{options.stamp}.vis.db")
    mode = done[0].mode
    config = ("1", kind, scoring.TASK[mode] if options.compare else "",
              json.dumps(scoring.TOOLTIPS[mode], ensure_ascii=False) if options.compare else None,
              max(r.config.get("micro_steps", 1) for r in done), int(options.overflow_check),
              json.dumps(scoring.colors(mode, True), ensure_ascii=False) if options.compare else "null",
              json.dumps(sorted({r.rank for r in done})), json.dumps(sorted({r.step for r in done})))
    with atomic_path(path) as temporary:
        os.unlink(temporary)
        write_db(temporary, [r.rows for r in done], config)
    for result in done:
        result.output = path


def _print_summary(logger, done: list, compare: bool) -> None:
    for r in done:
        for warning in r.warnings:
            logger.warning("%s%s", r.label, warning)
        if compare:
            logger.info("%sNodes built: NPU %d, Bench %d; matched %d, unmatched %d (NPU), %d (Bench).", r.label,
                        r.npu_nodes, r.bench_nodes, r.matched, r.unmatched, r.bench_unmatched)
            if r.top:
                logger.info("%sTop %d nodes by precision error:", r.label, len(r.top))
                for rank, (name, error) in enumerate(r.top, 1):
                    logger.info("%s  %2d. %-70s %.6g", r.label, rank, name, error)
            else:
                logger.info("%sNo node shows a precision error.", r.label)
        else:
            logger.info("%sNodes built: %d.", r.label, r.npu_nodes)
        if r.overflow:
            logger.info("%sNodes with an overflow level: %d.", r.label, r.overflow)
        logger.info("%sThe graph file path is: %s.", r.label, r.output)
