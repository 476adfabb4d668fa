"""The optional and heavy dependencies (torch, mindspore, ray, pandas): where a command first needs one it calls
`require`, which imports it or names it with its install hint in one line. Modules that are about a framework
(msprobe/pytorch/, acc_check's PyTorch replay) import it at their top and are themselves imported only where that
framework is needed; the CLI (msprobe/cli/) imports no command engine, numpy included, before a command runs, so
`msprobe -h` stays fast and works whichever of these is missing."""

from __future__ import annotations

import importlib

from msprobe.errors import MsprobeError, first_line
from msprobe.version import DISTRIBUTION

INSTALL = {
    "torch": "pip install torch==2.13.0 (the CPU build, before msprobe)",
    "mindspore": f'pip install "{DISTRIBUTION}[mindspore]" in an environment of its own (it pins mindspore 2.10 and '
                 'numpy<2)',
    "ray": f'pip install "{DISTRIBUTION}[ray]"',
    "pandas": f'pip install "{DISTRIBUTION}[pandas]"',
    "tensorboard": f'pip install "{DISTRIBUTION}[tensorboard]"',
}


def require(name: str, needed_for: str, error: type[Exception] = MsprobeError):
    """The module `name`; when it cannot be imported, `error` with one line: what needs it, why it failed, and
    how to install it. A module that is installed but fails on import (mindspore built against another numpy)
    is reported with the first line of its own error."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] == name.split(".")[0]:
            raise error(f"{needed_for} needs {name}, which is not installed: {INSTALL[name.split('.')[0]]}") from None
        reason = first_line(exc)
    except Exception as exc:   # noqa: BLE001 - a broken install raises anything on import
        reason = first_line(exc)
    raise error(f"{needed_for} needs {name}, which cannot be imported here ({reason}): "
                f"{INSTALL[name.split('.')[0]]}") from None

