"""`msprobe merge_result`: one workbook of chosen APIs and metrics across the compare results of all ranks."""

from __future__ import annotations

import argparse
import os

DESCRIPTION = ("Merge the compare results of several ranks (compare_result_rank<N>_<timestamp>.xlsx or .csv): "
               "one sheet per compare index with a column per rank, and a Consistency sheet naming the ranks "
               "whose collective outputs differ from the rest of their group.")
EPILOG = """examples:
  # compare a step folder of ranks, then merge the communication ops of every rank
  msprobe compare -tp npu_dump/step0 -gp gpu_dump/step0 -o cmp
  msprobe merge_result -i cmp -o merged -config merge_config.yaml

merge_config.yaml:
  api:                       # prefixes at any level: Distributed, Distributed.all_reduce,
    - Distributed.all_reduce #   Distributed.all_reduce.0, Distributed.all_reduce.0.forward
    - Distributed.broadcast
  compare_index:             # optional; absent or empty = every index of the results' mode
    - Max diff
    - NormRelativeErr

Output: <output dir>/multi_ranks_compare_merge_<timestamp>.xlsx. See docs/merge_result.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--input_dir", required=True, metavar="DIR",
                        help="directory holding compare_result_rank<N>_<timestamp>.xlsx|csv files")
    parser.add_argument("-o", "--output_dir", required=True, metavar="DIR", help="output directory (created)")
    parser.add_argument("-config", "--config-path", "--config_path", dest="config", required=True, metavar="YAML",
                        help="yaml with 'api' (list of API prefixes) and optional 'compare_index'")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="processes reading the result files (default: number of cores)")


def run(args: argparse.Namespace) -> int:
    from msprobe.cli.compare import banner
    from msprobe.dump.paths import check_input_dir, prepare_output_dir
    from msprobe.log import get_logger
    from msprobe.merge.merge_result import (
        CONSISTENCY_SHEET,
        ApiSelection,
        find_results,
        load_config,
        merge,
        read_ranks,
    )
    from msprobe.scale.stamp import timestamp
    from msprobe.table import columns as col
    from msprobe.table.xlsx_writer import CONSISTENCY_FILLS, Sheet, write_workbook

    logger = get_logger()
    config = load_config(args.config)
    input_dir = check_input_dir(args.input_dir, "input directory")
    found = find_results(input_dir)
    logger.info("Merging %d compare results (%s).", len(found), ", ".join(label for label, _ in found))
    results = read_ranks(found, ApiSelection(config.apis), max(1, args.jobs))
    sheets, problems = merge(results, config)
    for problem in problems:
        logger.warning("%s", problem)
    output_dir = prepare_output_dir(args.output_dir)
    path = os.path.join(output_dir, f"multi_ranks_compare_merge_{timestamp()}.xlsx")
    write_workbook([Sheet(name, table, "Consistent" if name == CONSISTENCY_SHEET else None,
                          CONSISTENCY_FILLS if name == CONSISTENCY_SHEET else None) for name, table in sheets], path)
    consistency = sheets[-1][1]
    broken = [n for n, ok in zip(consistency.cells[col.NPU_NAME], consistency.cells["Consistent"]) if not ok]
    rows = len(sheets[0][1])
    logger.info("%d rows x %d ranks in %d index sheets; %d collective outputs checked for consistency, %d "
                "inconsistent%s.", rows, len(sheets[0][1].columns) - 1, len(sheets) - 1, len(consistency),
                len(broken), f" (first: {broken[0]})" if broken else "")
    logger.info("The compare results of the multi-ranks are merged and saved in: %s.", path)
    banner(logger, "msprobe merge_result ends successfully.")
    return 0
