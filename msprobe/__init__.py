"""msprobe: precision debugging toolkit for deep-learning training dumps.

The Python API (msprobe/api.py, and msprobe.triage(...)) is re-exported here and loaded on first use, so `import msprobe` stays light:

    import msprobe
    result = msprobe.compare("target/dump.json", "golden/dump.json")
    result.to_pandas()
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from typing import TYPE_CHECKING

from msprobe.version import __version__

_API = ("compare", "diff_analyze", "read_dump", "CompareResult", "PairResult", "Summary", "DiffAnalysis",
        "DivergentOp", "DumpEntries", "DumpEntry")
_ERRORS = ("MsprobeError", "UsageError", "DumpFormatError", "PathError")
__all__ = ["compare", "diff_analyze", "read_dump", "triage", "CompareResult", "PairResult", "Summary", "DiffAnalysis",
           "DivergentOp", "DumpEntries", "DumpEntry", "MsprobeError", "UsageError", "DumpFormatError", "PathError",
           "__version__"]

if TYPE_CHECKING:
    from msprobe.api import (
        CompareResult,
        DiffAnalysis,
        DivergentOp,
        DumpEntries,
        DumpEntry,
        PairResult,
        Summary,
        compare,
        diff_analyze,
        read_dump,
    )
    from msprobe.errors import DumpFormatError, MsprobeError, PathError, UsageError


def __getattr__(name: str):
    if name == "compare":
        value = _Compare()
    elif name == "triage":      # the msprobe/triage/ package, callable: msprobe.triage(...) (docs/triage.md)
        value = importlib.import_module("msprobe.triage")
    elif name in _API:
        from msprobe import api

        value = getattr(api, name)
    elif name in _ERRORS:
        from msprobe import errors

        value = getattr(errors, name)
    else:
        raise AttributeError(f"module 'msprobe' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


class _Compare:
    """`msprobe.compare`: called, it is msprobe.api.compare (same signature and docstring); its other attributes
    are those of the msprobe/compare/ subpackage, so `import msprobe.compare.pipeline as pipeline` still works."""

    def __init__(self):
        from msprobe import api

        functools.update_wrapper(self, api.compare)

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(importlib.import_module("msprobe.compare"), name)

    def __repr__(self) -> str:
        return f"<msprobe.compare: {self.__wrapped__!r}>"


class _Package(types.ModuleType):
    """Keeps `msprobe.compare` the entry above when the msprobe/compare/ subpackage is imported (the import system
    would bind the subpackage here)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "compare" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
