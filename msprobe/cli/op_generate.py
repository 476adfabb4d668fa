"""`msprobe op_generate`: a standalone script replaying one dumped PyTorch API against the CPU benchmark."""

from __future__ import annotations

import argparse

DESCRIPTION = ("Write a standalone Python script for one API of a PyTorch dump: it rebuilds the API's inputs "
               "(random data from dtype/shape/Max/Min with a seed, or the dumped tensors), runs the API forward "
               "or forward+backward on the device under test (CUDA, else NPU, else CPU) and on the CPU at higher "
               "precision, and prints a Metric/Value table per output for the API's precision standard.")
EPILOG = """examples:
  msprobe op_generate -i config_op.json -o repro
  msprobe -f pytorch op_generate -i config_op.json -o repro      (the 1.x form)
  python repro/Functional.softmax.0.forward.py

config_op.json (relative paths are relative to the config file):
  {"dump_json_path": "dump/step0/rank0/dump.json",  "api_name": "Functional.softmax.0",
   "extract_api_path": "repro/Functional.softmax.0.json",  "propagation": "forward",
   "data_mode": "random_data",  "random_seed": 1234,  "iter_times": 1}
  {"extract_api_path": "repro/Functional.softmax.0.json"}       (an API extracted before)

Refused: entry names other than <Functional|Tensor|Torch>.<name>.<N>.<direction>, APIs that touch files,
processes or the network (Torch.save, ...), an extract_api_path that is the dump or the config file.

Output: <dir>/<api_name>.forward.py or <api_name>.backward.py. See docs/op_generate.md."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--config_input", dest="config", required=True, metavar="JSON",
                        help="config_op.json: dump_json_path, api_name, extract_api_path, propagation, data_mode, "
                             "random_seed, iter_times")
    parser.add_argument("-o", "--api_output_path", dest="output", required=True, metavar="DIR",
                        help="existing directory the script is written to")


def run(args: argparse.Namespace) -> int:
    from msprobe.acc_check.op_generate import generate
    from msprobe.cli.compare import banner
    from msprobe.log import get_logger

    logger = get_logger()
    path, script = generate(args.config, args.output)
    logger.info("%s (%s, %s, seed %d, %s standard) -> %s", script["full_name"], script["propagation"],
                script["data_mode"], script["seed"], script["standard"], path)
    logger.info("Run it with: python %s", path)
    banner(logger, "msprobe op_generate ends successfully.")
    return 0
