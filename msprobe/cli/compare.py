"""`msprobe compare`: options and the run of one compare (heavy modules are imported in run())."""

from __future__ import annotations

import argparse
import os

from msprobe.cli.arguments import int_at_least

DESCRIPTION = ("Compare a target dump (the run under test, 'NPU') with a golden dump (the reference, 'Bench'). "
               "The mode follows the dumps: statistics, md5 (CRC-32) or real tensor data.")
EPILOG = """examples:
  # one pair of dump files -> output/compare_result_<timestamp>.xlsx and advisor_<timestamp>.txt
  msprobe compare -tp target/step0/rank0/dump.json -gp golden/step0/rank0/dump.json

  # csv instead of xlsx, into ./out, printing one line per compared tensor (real-data dumps)
  msprobe compare -tp npu/dump.json -gp gpu/dump.json -o out --csv -tensor_log

  # table only, no advisor
  msprobe compare -tp npu/dump.json -gp gpu/dump.json -c

  # a step folder of rank folders: one table per rank, ranks compared in parallel
  msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o out

  # where do the runs first part, and on which rank? (writes diff_analyze_<timestamp>.json)
  msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o out -da

  # MindSpore static-graph kernel dumps: ranks 0 and 1, all steps
  msprobe compare -tp npu_kernel_dump -gp gpu_kernel_dump --rank 0,1

  # MindSpore target against a PyTorch golden: built-in API table, Cell -> Module, layer renames
  msprobe compare -tp ms/dump.json -gp pt/dump.json -am -cm cell_mapping.yaml
  msprobe compare -tp ms/dump.json -gp pt/dump.json -lm layer_mapping.yaml

  # an HTML report beside the table (one per rank for directories, plus index_<timestamp>.html)
  msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o out --csv --html

  # call counts differ (e.g. an extra op in the target): pair API calls by order under their module
  msprobe compare -tp npu/dump.json -gp gpu/dump.json -fm

  # thousands of ranks on shared storage: one Ray task per rank (an existing cluster, else a local Ray);
  # run the same command again after an interruption and the completed ranks are skipped
  msprobe compare -tp /shared/npu_dump/step0 -gp /shared/gpu_dump/step0 -o /shared/out --backend ray

The result table has one row per tensor or scalar argument; Result is pass, warning or error and
Err_message lists every rule that fired. See docs/compare.md for every column and rule."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--mode", choices=["auto"], default="auto",
                        help="accepted for compatibility with msprobe 26.x: auto (the only mode that compares "
                             "msprobe dumps; the mode follows the inputs)")
    parser.add_argument("-tp", "--target_path", required=True, metavar="PATH",
                        help="the run under test: a dump.json or debug.json, a rank folder, a step folder of "
                             "rank*/proc* folders, a dump root of step* folders, or a root with graph/ and "
                             "pynative/ halves")
    parser.add_argument("-gp", "--golden_path", required=True, metavar="PATH",
                        help="the reference run, of the same kind as --target_path")
    parser.add_argument("-o", "--output_path", nargs="?", const="./output", default="./output", metavar="DIR",
                        help="output directory, created if missing (default: ./output)")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="write the table as .csv instead of .xlsx")
    fmt.add_argument("--xlsx", action="store_true", help="write .xlsx (the default; accepted for compatibility)")
    parser.add_argument("-fm", "--fuzzy_match", action="store_true",
                        help="pair API calls by name and order under the same parent module, ignoring call "
                             "counts (for runs whose call counts differ)")
    parser.add_argument("-am", "--api_mapping", nargs="?", const="", default=None, metavar="YAML",
                        help="MindSpore target vs PyTorch golden: map API names with the built-in table "
                             "(Mint.* -> Torch.*, MintFunctional.* -> Functional.*, ops/Tensor names); a yaml "
                             "adds ms_api/pt_api entries with argument index lists")
    parser.add_argument("-cm", "--cell_mapping", nargs="?", const="", default=None, metavar="YAML",
                        help="map Cell names to Module names (Cell -> Module); a yaml maps "
                             "'{cell_path}.{Class}' names or substrings of them")
    parser.add_argument("-dm", "--data_mapping", metavar="YAML",
                        help="item-level mapping: a yaml of target item name: golden item name (wins over "
                             "every other mapping)")
    parser.add_argument("-lm", "--layer_mapping", nargs="?", const="", default=None, metavar="YAML",
                        help="MindSpore target: pair entries by their place in the module tree (construct.json); "
                             "a yaml of {TypeName: {target child: golden child}} renames layers")
    parser.add_argument("-da", "--diff_analyze", action="store_true",
                        help="first-divergence analysis: find the first op whose outputs differ, on which rank, "
                             "and how it spreads through communication ops; writes compare_result*.json (and "
                             "compare_result*.csv with --csv, .xlsx with --xlsx) and diff_analyze_<timestamp>.json")
    parser.add_argument("--rank", nargs="?", const="", default=None, metavar="LIST",
                        help="kernel compare of MindSpore static-graph dumps (directories): ranks to compare, "
                             "e.g. 0,1; given without a value, all ranks")
    parser.add_argument("--step", nargs="?", const="", default=None, metavar="LIST",
                        help="kernel compare: steps to compare, e.g. 0,2 (default: all)")
    parser.add_argument("-tensor_log", "--is_print_compare_log", dest="tensor_log", action="store_true",
                        help="real-data mode: log one line with the metrics of every compared tensor pair")
    parser.add_argument("--html", action="store_true",
                        help="also write compare_result_<timestamp>.html beside each table: one self-contained "
                             "page (summary, metric chart, module tree, filterable table, stacks) that opens "
                             "from disk; for directories also index_<timestamp>.html linking every rank")
    parser.add_argument("-c", "--compare_only", action="store_true",
                        help="do not run the advisor (no advisor_<timestamp>.txt)")
    parser.add_argument("-s", "--stack_mode", action="store_true",
                        help="NPU_Stack_Info is required: from --stack_path, else from the stack.json beside "
                             "each target dump, an error when there is none (without -s it is added whenever "
                             "that stack.json exists)")
    parser.add_argument("--stack_path", metavar="JSON",
                        help="the 1.x compare.json's stack_path: with -s, the stack file of the (single) target "
                             "dump; without -s, no NPU_Stack_Info")
    parser.add_argument("-j", "--jobs", type=int_at_least(1), default=os.cpu_count() or 1, metavar="N",
                        help="parallel workers: rank processes for directories, threads for tensor files "
                             "(default: number of cores)")
    from msprobe.cli.scale_options import add_arguments as scale_arguments

    scale_arguments(parser, "-j")


def run(args: argparse.Namespace) -> int:
    from msprobe.cli.scale_options import backend_of
    from msprobe.compare.batch import run_batch, succeeded
    from msprobe.compare.mapping import MappingOptions
    from msprobe.compare.pipeline import CompareOptions
    from msprobe.compare.summary import print_summary
    from msprobe.dump.locate import locate, stack_choice
    from msprobe.dump.paths import prepare_output_dir
    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger
    from msprobe.scale.task import JobFailure

    logger = get_logger()
    backend = backend_of(args, args.jobs)
    if args.html and (args.rank is not None or args.step is not None or args.diff_analyze):
        logger.warning("--html applies to result tables only; it is ignored with --rank/--step and -da.")
    if args.rank is not None or args.step is not None:
        return run_kernel_compare(args, backend)
    located = locate(args.target_path, args.golden_path)
    if not located.jobs and _kernel_dumps(args.target_path, args.golden_path):
        logger.info("MindSpore kernel dumps: every rank and step is compared (as with --rank).")
        return run_kernel_compare(args, backend)
    output_dir = prepare_output_dir(args.output_path or "./output")
    options = CompareOptions(output_dir=output_dir, output_format="csv" if args.csv else "xlsx",
                             tensor_log=args.tensor_log, compare_only=args.compare_only, jobs=args.jobs,
                             fuzzy=args.fuzzy_match,
                             mapping=MappingOptions(args.api_mapping, args.cell_mapping, args.data_mapping,
                                                    args.layer_mapping),
                             html=args.html, stack=stack_choice(args.stack_mode, args.stack_path, located.jobs))
    logger.info("Please check whether the input data belongs to you. If not, there may be security risks.")
    for problem in located.problems:
        logger.warning("%s", problem)
    if not located.jobs:
        raise MsprobeError("nothing to compare: " + "; ".join(located.problems))
    if args.diff_analyze:     # the json tables always; a .csv (.xlsx) of each as well when asked for
        from dataclasses import replace

        options = replace(options, output_format="csv" if args.csv else "xlsx" if args.xlsx else "json")
        return run_diff_analyze(located, options, backend)
    if len(located.jobs) == 1 and not located.problems and not located.jobs[0].out_subdir \
            and not located.jobs[0].suffix:
        from dataclasses import replace

        from msprobe.compare.batch import clean_directories
        from msprobe.compare.pipeline import compare_files
        from msprobe.scale.stamp import claim_stamp

        if backend.kind != "local":
            logger.warning("One pair of dump files is compared in this process; --backend %s applies to "
                           "directories.", backend.kind)
        clean_directories([output_dir])
        options = replace(options, stamp=claim_stamp([output_dir]))
        summaries = [compare_files(located.jobs[0].target, located.jobs[0].golden, options)]
        failures = []
    else:
        logger.info("Comparing %d dump pairs %s.", len(located.jobs), _where(backend, len(located.jobs)))
        batch, options = run_batch(located.jobs, options, backend)
        summaries = succeeded(batch.results)
        failures = [r for r in batch.results if isinstance(r, JobFailure)]
    print_summary(summaries, failures, located.problems, advice=not args.compare_only)
    if args.html and summaries and (len(located.jobs) > 1 or located.jobs[0].out_subdir or located.jobs[0].suffix):
        from msprobe.report.html import write_index
        from msprobe.scale.stamp import timestamp

        write_index(summaries, output_dir, options.stamp or timestamp())
    if not summaries:
        if len(failures) == 1:
            raise MsprobeError(f"{failures[0].label}{failures[0].message}")
        raise MsprobeError(f"no dump pair could be compared ({len(failures)} failed).")
    banner(logger, "msprobe compare ends successfully.")
    return 0


def _kernel_dumps(*paths: str) -> bool:
    from msprobe.compare.kernel import is_kernel_dump  # only when no dump.json pair is found

    return all(is_kernel_dump(path) for path in paths)


def _where(backend, jobs: int) -> str:
    if backend.kind == "ray":
        return "on Ray"
    return f"with {min(backend.workers, jobs)} workers"


def run_kernel_compare(args: argparse.Namespace, backend) -> int:
    from msprobe.compare.batch import run_batch
    from msprobe.compare.kernel import kernel_files, kernel_pairs, parse_id_list, run_kernel_pair
    from msprobe.compare.pipeline import CompareOptions
    from msprobe.dump.paths import check_input_dir, prepare_output_dir
    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger
    from msprobe.scale.task import JobFailure

    logger = get_logger()
    if args.diff_analyze:
        logger.warning("-da analyses dump.json dumps (levels L0, L1, mix); MindSpore kernel dumps (level L2) get the "
                       "kernel compare table, whose 'Accuracy Reached or Not' column marks the kernels that differ.")
    target = check_input_dir(args.target_path, "target kernel dump directory")
    golden = check_input_dir(args.golden_path, "golden kernel dump directory")
    ranks, steps = parse_id_list(args.rank, "rank"), parse_id_list(args.step, "step")
    pairs, problems = kernel_pairs(target, golden, ranks, steps)
    for problem in problems:
        logger.warning("%s", problem)
    if not pairs:
        raise MsprobeError("no (rank, step) of the kernel dumps could be paired"
                           f"{' for the selected ranks/steps' if ranks or steps else ''}.")
    options = CompareOptions(output_dir=prepare_output_dir(args.output_path or "./output"),
                             output_format="csv" if args.csv else "xlsx", jobs=args.jobs)
    batch, _ = run_batch(pairs, options, backend, run_kernel_pair, "kernel_compare", kernel_files)
    done = [r for r in batch.results if not isinstance(r, JobFailure)]
    for result in batch.results:
        if isinstance(result, JobFailure):
            logger.error("%sfailed: %s", result.label, result.message)
        else:
            counts = ", ".join(f"{n} {k}" for k, n in sorted(result.accuracy.items()))
            logger.info("%s%d rows, Accuracy Reached or Not: %s -> %s", result.label, result.rows, counts,
                        result.output)
    if not done:
        raise MsprobeError("no kernel dump pair could be compared.")
    banner(logger, "msprobe compare ends successfully.")
    return 0


def run_diff_analyze(located, options, backend) -> int:
    from msprobe.compare.batch import run_batch
    from msprobe.compare.diff_analyze import analyze_job, describe, digest_files, find_origin, write_analysis
    from msprobe.errors import MsprobeError
    from msprobe.log import get_logger
    from msprobe.scale.task import JobFailure

    logger = get_logger()
    batch, _ = run_batch(located.jobs, options, backend, analyze_job, "diff_analyze", digest_files)
    groups: dict = {}
    for job, result in zip(located.jobs, batch.results):
        if isinstance(result, JobFailure):
            logger.error("%sfailed: %s", result.label, result.message)
            continue
        groups.setdefault(job.out_subdir, []).append(result)
    if not groups:
        raise MsprobeError("no dump pair could be analysed.")
    for out_subdir, digests in groups.items():
        finding = find_origin(digests)
        if out_subdir:
            logger.info("%s:", out_subdir)
        for line in describe(finding):
            logger.info("%s", line)
        write_analysis(finding, os.path.join(options.output_dir, out_subdir), options.output_format)
    return 0


def banner(logger, message: str) -> None:
    logger.info("*" * 84)
    logger.info("*%s*", message.center(82))
    logger.info("*" * 84)
