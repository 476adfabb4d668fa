"""MindSpore data collection: `PrecisionDebugger` writes dumps in the format `msprobe compare` reads.

Needs mindspore (PyNative mode): `pip install "msprobe[mindspore]"` in an environment with numpy<2.
"""

from msprobe.optional import require

require("mindspore", "msprobe.mindspore (the MindSpore collector)")

from msprobe.mindspore._interim import DumpConfigError  # noqa: E402
from msprobe.mindspore.debugger import PrecisionDebugger, seed_all  # noqa: E402

__all__ = ["DumpConfigError", "PrecisionDebugger", "seed_all"]
