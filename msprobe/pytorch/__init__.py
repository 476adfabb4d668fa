"""PyTorch data collection: PrecisionDebugger writes dumps in the format `msprobe compare` reads."""

from msprobe.collect.config import DumpConfigError
from msprobe.pytorch.debugger import PrecisionDebugger, seed_all

__all__ = ["DumpConfigError", "PrecisionDebugger", "seed_all"]
