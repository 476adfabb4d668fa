"""MindSpore data collection: `PrecisionDebugger` writes dumps in the format `msprobe compare` reads; `TrainerMon`
monitors a training run (docs/monitor.md).

Needs mindspore 2.10 in PyNative mode, which needs numpy<2: `pip install "msprobe-toolkit[mindspore]"` in its own
environment (docs/dump.md).
"""

from msprobe.optional import require

# an ImportError naming the install command when mindspore is missing or cannot be imported (numpy 2)
require("mindspore", "msprobe.mindspore (the MindSpore collector)", ImportError)

from msprobe.collect.config import DumpConfigError  # noqa: E402
from msprobe.mindspore.debugger import PrecisionDebugger, seed_all  # noqa: E402
from msprobe.mindspore.monitor import TrainerMon  # noqa: E402

__all__ = ["DumpConfigError", "PrecisionDebugger", "TrainerMon", "seed_all"]
