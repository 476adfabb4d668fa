"""`msprobe code_mapping`: attach the Python source lines and scope of the MindSpore IR node that produced each
dumped kernel tensor (or each statistic.csv row) of a static-graph dump."""

from __future__ import annotations

import argparse
import os

DESCRIPTION = ("Map MindSpore static-graph dump data to source code: every kernel .npy file (or every row of "
               "statistic.csv) is bound by its op name to the IR nodes whose scope it names, and gets their "
               "'# In file' source lines (Code Stack) and full scope names (Scope Name).")
EPILOG = """examples:
  # kernel tensor dump (.npy files) -> <output>/code_mapping_<timestamp>.csv
  msprobe code_mapping --ir graphs/ms_output_trace_code_graph_0.ir --dump_data dump/rank_0/Net/0/0 --output out
  # gzip-compressed IR, a single file
  msprobe code_mapping --ir graph_build_0_0094.ir.gz --dump_data MatMul.Default_net-Net_MatMul-op0.0.0.1.output.0.DefaultFormat.npy
  # statistics dump: a copy of each statistic.csv with Code Stack and Scope Name appended, under --output
  msprobe code_mapping --ir graph_build_0_0094.ir --dump_data dump/rank_0/Net/0/0/statistic.csv --output out
  # the 1.x form
  msprobe -f mindspore code_mapping --ir X.ir --dump_data dump/rank_0/Net/0/0

IR files: save them with save_graphs / MS_DEV_SAVE_GRAPHS; the anf_after_graph_build_*.ir / graph_build_*.ir file
or the ms_output_trace_code_graph_<id>.ir that a kernel dump writes beside the data. See docs/code_mapping.md."""

# Unbound file names listed in the summary at most.
LIST_CAP = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ir", required=True, metavar="IR_FILE",
                        help="MindSpore text IR file (*.ir, or gzip-compressed *.ir.gz)")
    parser.add_argument("--dump_data", "--dump-data", dest="dump_data", required=True, metavar="PATH",
                        help="a kernel .npy file, a statistic.csv, or a directory searched recursively for them")
    parser.add_argument("-o", "--output", default="./", metavar="DIR",
                        help="output directory, created if missing (default: ./)")


def run(args: argparse.Namespace) -> int:
    from msprobe.cli.compare import banner
    from msprobe.code_mapping.bind import (
        COLUMNS,
        BindSummary,
        ScopeIndex,
        bind_statistic_file,
        bind_tensor_files,
        find_dump_files,
        statistic_output_path,
        write_outputs,
    )
    from msprobe.code_mapping.ir_parser import parse_ir
    from msprobe.dump.paths import check_input_dir, check_input_file, prepare_output_dir
    from msprobe.log import get_logger
    from msprobe.scale.stamp import claim_stamp

    logger = get_logger()
    ir_path = check_input_file(args.ir, "--ir")
    if os.path.isdir(args.dump_data):
        dump_data = check_input_dir(args.dump_data, "--dump_data")
    else:
        dump_data = check_input_file(args.dump_data, "--dump_data")
    mode, files = find_dump_files(dump_data)
    graph = parse_ir(ir_path)
    scoped = graph.scoped
    without_source = [node for node in scoped if not node.code]
    logger.info("IR %s: %d nodes in %d subgraph(s), %d with a scope, %d of them without source lines%s.",
                ir_path, len(graph.nodes), len(graph.subgraphs), len(scoped), len(without_source),
                f" (e.g. {', '.join(node.scope for node in without_source[:3])})" if without_source else "")
    if graph.declared_subgraphs is not None and len(graph.subgraphs) < graph.declared_subgraphs:
        logger.warning("IR %s declares %d subgraphs in its header but holds %d; it may be incomplete.", ir_path,
                       graph.declared_subgraphs, len(graph.subgraphs))
    index = ScopeIndex(graph.nodes)
    output_dir = prepare_output_dir(args.output)
    if mode == "tensor":
        logger.info("Binding %d .npy files of %s.", len(files), dump_data)
        rows, summary = bind_tensor_files(files, index)
        path = os.path.join(output_dir, f"code_mapping_{claim_stamp([output_dir])}.csv")
        outputs = [(path, list(COLUMNS), rows)]
    else:
        logger.info("No .npy file found; augmenting %d statistic.csv file(s) of %s.", len(files), dump_data)
        summary = BindSummary("statistic", files=len(files))
        base = dump_data if os.path.isdir(dump_data) else os.path.dirname(dump_data)
        outputs = [(statistic_output_path(source, base, output_dir), *bind_statistic_file(source, index, summary))
                   for source in files]
    write_outputs(outputs)
    summary.outputs.extend(path for path, _, _ in outputs)
    what = ".npy files" if mode == "tensor" else "statistic.csv rows"
    logger.info("Bound %d of %d %s to IR nodes; %d of them to nodes without source lines.",
                summary.bound, summary.rows, what, summary.without_code)
    if summary.unbound:
        shown = summary.unbound[:LIST_CAP]
        weights = sum(1 for name in summary.unbound if name.startswith("Parameter."))
        logger.warning("%d %s have no IR node (no scope of the IR occurs in their op name%s): %s%s",
                       len(summary.unbound), what,
                       f"; {weights} of them Parameter.* weight files, which no node produces" if weights else "",
                       ", ".join(shown), f", ... ({len(summary.unbound) - len(shown)} more)"
                       if len(summary.unbound) > len(shown) else "")
    for path in summary.outputs:
        logger.info("The code mapping is saved in: %s.", path)
    banner(logger, "msprobe code_mapping ends successfully.")
    return 0
