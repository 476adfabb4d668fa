"""`msprobe report`: a self-contained HTML page from an existing compare result table (.csv or .xlsx)."""

from __future__ import annotations

import argparse

DESCRIPTION = ("Make the HTML report of an existing compare result (compare_result_<timestamp>.csv or .xlsx): one "
               "self-contained page with the summary, a chart of the key metric along execution order, the module "
               "tree (with --construct) and a filterable, sortable table with the stack of every row. It opens "
               "from disk in a browser; no server and no network are needed.")
EPILOG = """examples:
  # page beside the table: out/compare_result_20250101120000.html
  msprobe report out/compare_result_20250101120000.csv

  # into another directory, with the module tree of the target dump
  msprobe report out/compare_result_20250101120000.xlsx -o pages --construct npu_dump/step0/rank0/construct.json

The summary numbers are recomputed from the Result column; `msprobe compare ... --html` writes the same page
while comparing. See docs/report.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", metavar="RESULT", help="a compare result table: .csv or .xlsx")
    parser.add_argument("-o", "--output_dir", metavar="DIR",
                        help="directory for the .html (created; default: beside the table)")
    parser.add_argument("--construct", metavar="JSON",
                        help="construct.json of the target dump, for the module tree (default: no tree)")
    parser.add_argument("--diff_analyze", metavar="JSON",
                        help="diff_analyze_<timestamp>.json of `msprobe compare -da`: its answer (the op and "
                             "rank where the runs first part) is shown in the summary")


def run(args: argparse.Namespace) -> int:
    from msprobe.compare.advisor import advise
    from msprobe.dump.paths import check_input_file, prepare_output_dir
    from msprobe.errors import UsageError
    from msprobe.report.html import write_table_html

    if not args.table.lower().endswith((".csv", ".xlsx")):
        raise UsageError(f"{args.table}: the compare result must be a .csv or .xlsx file.")
    table = check_input_file(args.table, "compare result")
    construct = check_input_file(args.construct, "construct.json") if args.construct else None
    diff_analyze = check_input_file(args.diff_analyze, "diff_analyze file") if args.diff_analyze else None
    output_dir = prepare_output_dir(args.output_dir) if args.output_dir else None
    write_table_html(table, advise, output_dir, construct, diff_analyze)
    return 0
