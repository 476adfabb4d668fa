"""PyTorch data collection: PrecisionDebugger writes dumps in the format `msprobe compare` reads; TrainerMon
monitors a training run step by step (docs/monitor.md)."""

from msprobe.collect.config import DumpConfigError
from msprobe.monitor.config import MonitorConfigError
from msprobe.monitor.engine import MonitorStop
from msprobe.pytorch.debugger import PrecisionDebugger, seed_all
from msprobe.pytorch.monitor import TrainerMon

__all__ = ["DumpConfigError", "MonitorConfigError", "MonitorStop", "PrecisionDebugger", "TrainerMon", "seed_all"]
