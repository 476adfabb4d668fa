"""acc_check of a PyTorch dump (spec §5): its APIs, files and options. Importing it imports no torch."""

from __future__ import annotations

import math

from msprobe.acc_check.common import BLANK, ERROR, METRICS, PASS, SKIP, WARNING
from msprobe.acc_check.framework import Framework, data_names_of
from msprobe.acc_check.torch.apis import BLACK_LIST, parse_api, support_lists
from msprobe.errors import MsprobeError
from msprobe.optional import require


class TorchFramework(Framework):
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
        parsed = parse_api(name)
        return parsed is not None and parsed[1] in support_lists().get(parsed[0], ())

    def named_for_replay(self, name: str) -> bool:
        return parse_api(name) is not None

    def needed_files(self, data: dict, names: list) -> list:
        wanted = []
        for name in names:
            if not self.supported(name):
                continue
            wanted += data_names_of(data.get(f"{name}.forward"), ("input_args", "input_kwargs"))
            backward = data.get(f"{name}.backward")
            if backward:
                wanted += data_names_of({"input": (backward.get("input") or [])[:1]}, ("input",))
        return wanted

    def known_api_name(self, api_name: str) -> bool:
        return api_name in BLACK_LIST or api_name.startswith("npu_") or \
            any(api_name in names for names in support_lists().values())

    def check(self, options) -> None:
        require("torch", "acc_check of a PyTorch dump")
        if options.max_abs_err is not None:
            raise MsprobeError("--max-abs-err applies to MindSpore dumps; PyTorch outputs are judged by the precision "
                               "standards (spec §5.7).")
        from msprobe.acc_check.torch.runner import device_name

        device = device_name(options.device_id)
        if options.jit_compile and not device.startswith("npu"):
            raise MsprobeError(f"-j/--jit_compile applies to Ascend NPU only (torch_npu); the device under test "
                               f"here is {device}.")

    def prepare(self, options) -> str:
        from msprobe.acc_check.torch.runner import device_name, set_jit_compile

        device = device_name(options.device_id)
        if device.startswith("npu"):
            set_jit_compile(options.jit_compile)
        return device

    def replayer(self, data: dict, tensor_dir, device: str, options):
        from msprobe.acc_check.torch.runner import Replayer

        return Replayer(data, tensor_dir, device, lists=options.lists)

    def save_error(self, directory: str, result) -> None:
        from msprobe.acc_check.torch.runner import save_error

        save_error(directory, result)
