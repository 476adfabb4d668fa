"""The two acc_check backends: what differs between checking a PyTorch dump and a MindSpore dump.

The engine (`check.run_acc_check`: API selection, input checks, the loop, resume, summary) and the CSV files
(`results.py`) are shared; a backend says which entries are APIs to check, which tensor files they need, what
the result and details files look like (spec §5.8 for PyTorch, §4.5 for MindSpore), and creates the replayer
that runs one API on the device under test and on the CPU benchmark. Importing this module imports no framework:
torch and mindspore are imported when a backend is prepared for a run.
"""

from __future__ import annotations

import functools
import math
import os

from msprobe.acc_check.common import BLANK, ERROR, METRICS, PASS, SKIP, WARNING
from msprobe.errors import DumpFormatError, MsprobeError

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


class Backend:
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
        """The APIs of a dump this backend writes rows for, in dump order."""
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
        from msprobe.acc_check.common import skip_result

        return skip_result(name, message)

    def save_error(self, directory: str, result) -> None:
        raise NotImplementedError


def forward_count(data: dict) -> int:
    return sum(1 for key in data if key.endswith(".forward") and not key.startswith(("Module.", "Cell.")))


def _data_names(record, keys) -> list:
    from msprobe.acc_check.common import data_names

    found = []
    for key in keys:
        found.extend(data_names((record or {}).get(key)))
    return found


# ----------------------------------------------------------------------------------------------------------------
class TorchBackend(Backend):
    framework = "PyTorch"
    result_header = ["API name", "Forward Test Success", "Backward Test Success", "Message"]
    details_header = ["API Name", "Bench Dtype", "DEVICE Dtype", "Shape", *METRICS, "Status", "Message"]
    metrics = METRICS
    statuses = frozenset((PASS, WARNING, ERROR, SKIP, BLANK))
    benchmark = "cpu (float64; float32 for float16/bfloat16 inputs)"
    precision = 14

    def cell(self, value) -> str:
        if value is None:
            return " "
        if isinstance(value, float):
            if math.isnan(value):
                return "nan"
            if math.isinf(value):
                return "inf" if value > 0 else "-inf"
            return f"{value:.{self.precision}f}"
        return str(value)

    def result_row(self, result) -> list:
        row = [result.full_name, result.forward_status, result.backward_status]
        if SKIP in (result.forward_status, result.backward_status):
            row.append(result.message or (result.forward[0].message if result.forward else ""))
        return row

    def api_names(self, data: dict) -> list:
        return [key[: -len(".forward")] for key in data if "Module" not in key and key.endswith(".forward")]

    def real_data(self, content: dict) -> bool:
        return content.get("task") == "tensor" or bool(content.get("dump_data_dir"))

    def supported(self, name: str) -> bool:
        from msprobe.acc_check.runner import parse_api, support_lists

        parsed = parse_api(name)
        return parsed is not None and parsed[1] in support_lists().get(parsed[0], ())

    def named_for_replay(self, name: str) -> bool:
        from msprobe.acc_check.runner import parse_api

        return parse_api(name) is not None

    def needed_files(self, data: dict, names: list) -> list:
        wanted = []
        for name in names:
            if not self.supported(name):
                continue
            wanted += _data_names(data.get(f"{name}.forward"), ("input_args", "input_kwargs"))
            backward = data.get(f"{name}.backward")
            if backward:
                wanted += _data_names({"input": (backward.get("input") or [])[:1]}, ("input",))
        return wanted

    def known_api_name(self, api_name: str) -> bool:
        from msprobe.acc_check.runner import BLACK_LIST, support_lists

        return api_name in BLACK_LIST or api_name.startswith("npu_") or \
            any(api_name in names for names in support_lists().values())

    def check(self, options) -> None:
        try:
            import torch  # noqa: F401
        except ImportError:
            raise MsprobeError("acc_check of a PyTorch dump needs torch (pip install torch).") from None
        if options.max_abs_err is not None:
            raise MsprobeError("--max-abs-err applies to MindSpore dumps; PyTorch outputs are judged by the precision "
                               "standards (spec §5.7).")
        from msprobe.acc_check.runner import device_name

        device = device_name(options.device_id)
        if options.jit_compile and not device.startswith("npu"):
            raise MsprobeError(f"-j/--jit_compile applies to Ascend NPU only (torch_npu); the device under test "
                               f"here is {device}.")

    def prepare(self, options) -> str:
        from msprobe.acc_check.runner import device_name, set_jit_compile

        device = device_name(options.device_id)
        if device.startswith("npu"):
            set_jit_compile(options.jit_compile)
        return device

    def replayer(self, data: dict, tensor_dir, device: str, options):
        from msprobe.acc_check.runner import Replayer

        return Replayer(data, tensor_dir, device, lists=options.lists)

    def save_error(self, directory: str, result) -> None:
        from msprobe.acc_check.runner import save_error

        save_error(directory, result)


# ----------------------------------------------------------------------------------------------------------------
MS_TYPES = {"Mint": "mint", "MintFunctional": "mint_functional", "Tensor": "tensor", "Functional": "functional"}


@functools.lru_cache(maxsize=1)
def ms_support_lists() -> dict:
    """The MindSpore API names of msprobe/data/acc_check_mindspore_apis.yaml, by section."""
    import yaml

    with open(os.path.join(DATA_DIR, "acc_check_mindspore_apis.yaml"), encoding="utf-8") as handle:
        lists = yaml.safe_load(handle)
    return {key: frozenset(lists[key]) for key in MS_TYPES.values()}


def ms_checkable(key: str) -> bool:
    """Spec §3.1: a data key `Type.name….N.direction` of a MindSpore dump is checked when Type is Mint or
    MintFunctional, or Tensor with a name of the Tensor list, or Functional.flash_attention_score."""
    fields = key.split(".")
    if len(fields) < 4:
        return False
    api_type, name = fields[0], ".".join(fields[1:-2])
    if api_type in ("Mint", "MintFunctional"):
        return True
    return api_type in ("Tensor", "Functional") and name in ms_support_lists()[MS_TYPES[api_type]]


class MindSporeBackend(Backend):
    framework = "MindSpore"
    result_header = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
    details_header = ["API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr",
                      "Status", "Message"]
    metrics = ["Cosine", "MaxAbsErr", "MaxRelativeErr"]
    statuses = frozenset((PASS, ERROR, SKIP, ""))
    benchmark = "cpu, MindSpore (float64; float32 for float16/bfloat16 inputs)"

    def cell(self, value) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else
                                                              ("inf" if value > 0 else "-inf"))
        return str(value)

    def result_row(self, result) -> list:
        return [result.full_name, result.forward_status, result.backward_status, result.message]

    def api_names(self, data: dict) -> list:
        """Checkable APIs (forward or backward record) in order of first appearance; the others are not checked
        and get no row (spec §3.1)."""
        names = {}
        for key in data:
            if key.endswith((".forward", ".backward")) and ms_checkable(key):
                names.setdefault(key.rsplit(".", 1)[0], None)
        return list(names)

    def real_data(self, content: dict) -> bool:
        task = content.get("task")
        if task not in ("statistics", "tensor"):
            raise DumpFormatError(f"the MindSpore dump's task is {task!r}; acc_check needs 'statistics' "
                                  "(random inputs from Max/Min) or 'tensor' (the dumped tensors).")
        return task == "tensor"

    def supported(self, name: str) -> bool:
        return True    # api_names lists only checkable APIs

    def needed_files(self, data: dict, names: list) -> list:
        wanted = []
        for name in names:
            wanted += _data_names(data.get(f"{name}.forward"), ("input_args", "input_kwargs", "output"))
            wanted += _data_names(data.get(f"{name}.backward"), ("input", "output"))
        return wanted

    def known_api_name(self, api_name: str) -> bool:
        return any(api_name in names for names in ms_support_lists().values())

    def check(self, options) -> None:
        if options.jit_compile:
            raise MsprobeError("-j/--jit_compile applies to PyTorch dumps on Ascend NPU (torch_npu) only; this is "
                               "a MindSpore dump.")
        from msprobe.acc_check.ms_runner import import_mindspore

        import_mindspore()

    def prepare(self, options) -> str:
        from msprobe.acc_check.ms_runner import device_name

        return device_name(options.device_id)

    def skip(self, data: dict, name: str, message: str):
        from msprobe.acc_check.common import ApiResult

        return ApiResult(name, SKIP if f"{name}.forward" in data else "",
                         SKIP if f"{name}.backward" in data else "", message)

    def replayer(self, data: dict, tensor_dir, device: str, options):
        from msprobe.acc_check.ms_runner import MsReplayer

        return MsReplayer(data, tensor_dir, device, options)

    def save_error(self, directory: str, result) -> None:
        from msprobe.acc_check.ms_runner import save_error

        save_error(directory, result)


TORCH, MINDSPORE = TorchBackend(), MindSporeBackend()


def backend_for(content: dict, path: str) -> Backend:
    """The backend of a dump.json's `framework` field (spec §2.1)."""
    if "framework" not in content:
        raise DumpFormatError(f'Key "framework" not found in {path}')
    framework = str(content["framework"]).lower()
    if framework in ("pytorch", "pt"):
        return TORCH
    if framework in ("mindspore", "ms"):
        return MINDSPORE
    if framework == "mindtorch":
        raise MsprobeError(f"{path} is a MindTorch (MSAdapter) dump; acc_check checks PyTorch and MindSpore dumps "
                           "(the MSAdapter checker is not implemented).")
    raise DumpFormatError(f"Unsupported framework in api_info: {content['framework']}")
