"""The framework of a dump: TORCH or MINDSPORE, from its dump.json (spec §2.1)."""

from __future__ import annotations

from msprobe.acc_check.framework import Framework
from msprobe.acc_check.mindspore.framework import MindSporeFramework
from msprobe.acc_check.torch.framework import TorchFramework
from msprobe.errors import DumpFormatError, MsprobeError

TORCH, MINDSPORE = TorchFramework(), MindSporeFramework()


def framework_for(content: dict, path: str) -> Framework:
    """The framework of a dump.json's `framework` field (spec §2.1)."""
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
