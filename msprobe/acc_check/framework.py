"""What differs between checking a PyTorch dump and a MindSpore dump: the Framework of a dump.

The engine (`check.run_acc_check`: API selection, input checks, the loop, resume, summary) and the CSV files
(`results.py`) are shared; a framework says which entries are APIs to check, which tensor files they need, what
the result and details files look like (spec §5.8 for PyTorch, §4.5 for MindSpore), and creates the replayer
that runs one API on the device under test and on the CPU benchmark. Importing this module imports no framework:
torch and mindspore are imported when a framework is prepared for a run.
"""

from __future__ import annotations

import os

from msprobe.acc_check.common import data_names, skip_result

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")   # the shipped API lists


class Framework:
    """What differs between checking a PyTorch dump and a MindSpore dump (torch/framework.py,
    mindspore/framework.py)."""


    framework = ""          # the dump's framework, as named in messages
    result_header: list = []
    details_header: list = []
    metrics: list = []      # details columns between Shape and Status
    statuses: frozenset = frozenset()   # valid Forward/Backward Test Success cells
    benchmark = ""

    # --- the files -------------------------------------------------------------------------------------------
    def cell(self, value) -> str:
        raise NotImplementedError

    def details_rows(self, result) -> list:
        rows = []
        for direction, outputs in (("forward", result.forward), ("backward", result.backward)):
            for i, output in enumerate(outputs):
                if output.metrics.get("dropout"):
                    continue
                rows.append([f"{result.full_name}.{direction}.output.{i}", output.bench_dtype, output.device_dtype,
                             output.shape, *(self.cell(output.metrics.get(m)) for m in self.metrics),
                             output.status, output.message])
        return rows

    def result_row(self, result) -> list:
        raise NotImplementedError

    # --- the dump ----------------------------------------------------------------------------------------------
    def api_names(self, data: dict) -> list:
        """The APIs of a dump this framework writes rows for, in dump order."""
        raise NotImplementedError

    def real_data(self, content: dict) -> bool:
        raise NotImplementedError

    def supported(self, name: str) -> bool:
        """Whether the API is replayed (the others get a SKIP row)."""
        raise NotImplementedError

    def named_for_replay(self, name: str) -> bool:
        """Whether the name has the form of a replayable API (else the replayer writes its own SKIP row)."""
        return True

    def needed_files(self, data: dict, names: list) -> list:
        """data_name of every tensor file a real-data run of these APIs reads."""
        raise NotImplementedError

    def known_api_name(self, api_name: str) -> bool:
        """Whether a -config white/black list entry names an API of this framework."""
        raise NotImplementedError

    # --- the run -----------------------------------------------------------------------------------------------
    def check(self, options) -> None:
        """Import the framework and refuse options that do not apply to it (or to its device under test), without
        using a device: the driver of multi_acc_check calls it before any worker starts."""
        raise NotImplementedError

    def prepare(self, options) -> str:
        """After check(): apply the device options; returns the device under test (`cpu`, `npu:0`, ...)."""
        raise NotImplementedError

    def replayer(self, data: dict, tensor_dir, device: str, options):
        raise NotImplementedError

    def skip(self, data: dict, name: str, message: str):
        """The result of an API that is refused before it is replayed (guard.py), with `message` saying why."""
        return skip_result(name, message)

    def save_error(self, directory: str, result) -> None:
        raise NotImplementedError


def forward_count(data: dict) -> int:
    return sum(1 for key in data if key.endswith(".forward") and not key.startswith(("Module.", "Cell.")))


def data_names_of(record, keys) -> list:
    found = []
    for key in keys:
        found.extend(data_names((record or {}).get(key)))
    return found
