"""acc_check of a MindSpore dump (spec §4): its APIs, files and options. Importing it imports no mindspore."""

from __future__ import annotations

import math

from msprobe.acc_check.common import ERROR, PASS, SKIP, ApiResult
from msprobe.acc_check.framework import Framework, data_names_of
from msprobe.acc_check.mindspore.apis import ms_checkable, ms_support_lists
from msprobe.errors import DumpFormatError, MsprobeError


class MindSporeFramework(Framework):
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
            wanted += data_names_of(data.get(f"{name}.forward"), ("input_args", "input_kwargs", "output"))
            wanted += data_names_of(data.get(f"{name}.backward"), ("input", "output"))
        return wanted

    def known_api_name(self, api_name: str) -> bool:
        return any(api_name in names for names in ms_support_lists().values())

    def check(self, options) -> None:
        if options.jit_compile:
            raise MsprobeError("-j/--jit_compile applies to PyTorch dumps on Ascend NPU (torch_npu) only; this is "
                               "a MindSpore dump.")
        from msprobe.acc_check.mindspore.runner import import_mindspore

        import_mindspore()

    def prepare(self, options) -> str:
        from msprobe.acc_check.mindspore.runner import device_name

        return device_name(options.device_id)

    def skip(self, data: dict, name: str, message: str):

        return ApiResult(name, SKIP if f"{name}.forward" in data else "",
                         SKIP if f"{name}.backward" in data else "", message)

    def replayer(self, data: dict, tensor_dir, device: str, options):
        from msprobe.acc_check.mindspore.runner import MsReplayer

        return MsReplayer(data, tensor_dir, device, options)

    def save_error(self, directory: str, result) -> None:
        from msprobe.acc_check.mindspore.runner import save_error

        save_error(directory, result)
