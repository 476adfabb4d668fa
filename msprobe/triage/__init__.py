"""msprobe triage: from two training commands to the culprit op and its evidence (docs/triage.md).

    import msprobe
    findings = msprobe.triage("python train.py --bf16", "python train.py", output_dir="triage_out")
    findings.culprit, findings.category, findings.exit_code

The package is callable: `msprobe.triage(...)` is msprobe.triage.loop.triage (the import system binds this package
to `msprobe.triage`, so the package itself takes the call). Nothing heavy is imported here: the training processes
import msprobe.triage.inject through this package at start-up."""

from __future__ import annotations

import sys
import types

__all__ = ["triage", "Findings"]


def triage(*args, **kwargs):
    """msprobe.triage.loop.triage: run the triage loop and return its Findings."""
    from msprobe.triage.loop import triage as run

    return run(*args, **kwargs)


def __getattr__(name: str):
    if name == "Findings":
        from msprobe.triage.loop import Findings

        return Findings
    raise AttributeError(f"module 'msprobe.triage' has no attribute {name!r}")


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return triage(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
