"""msprobe triage's hook into the user's training processes (docs/triage.md). `msprobe triage` puts this folder
first on PYTHONPATH, so every Python process of the training command (torchrun/msrun children included) runs it at
start-up. It does nothing unless MSPROBE_TRIAGE_PLAN is set; then it chains to the sitecustomize this one hides
and arms msprobe.triage.inject, which installs the collector when torch or mindspore is imported. A failure here
is printed as one line and the training runs on untouched."""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the sitecustomize that this one hides (the next one on sys.path), as Python would have."""
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _arm() -> None:
    root = os.environ.get("MSPROBE_TRIAGE_ROOT", "")
    added = bool(root) and root not in sys.path
    if added:
        sys.path.insert(0, root)      # the msprobe that launched this run, for this import only
    try:
        from msprobe.triage import inject
    finally:
        if added:
            sys.path.remove(root)
    inject.arm(os.environ["MSPROBE_TRIAGE_PLAN"])


try:
    _chain()
finally:
    if os.environ.get("MSPROBE_TRIAGE_PLAN"):
        try:
            _arm()
        except Exception as exc:  # noqa: BLE001 - the training must run even when the hook cannot
            sys.stderr.write(f"msprobe triage: the collector could not be installed ({type(exc).__name__}: "
                             f"{exc}); the run continues without it\n")
