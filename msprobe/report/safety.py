"""Refuse to write cells a spreadsheet could run as formulas (spec §7.4)."""

from __future__ import annotations

import re

from msprobe.dump.naming import is_formula_like
from msprobe.errors import MsprobeError

_LINE_START = re.compile(r"(?m)^[+\-=%@\uff0b\uff0d\uff1d\uff05\uff20]|;[+\-=%@\uff0b\uff0d\uff1d\uff05\uff20]")


def check_cells(table, texts: dict, path: str) -> None:
    """Scan whole text columns at once; only on a hit look at single cells (numbers such as -1.5 pass)."""
    for name in table.columns:
        if is_formula_like(name):
            raise MsprobeError(f"Malicious value [{name}] not allowed to be written into {path}.")
    for name in table.columns_to_check():
        column = texts[name]
        if not _LINE_START.search("\n".join(column)):
            continue
        for value in column:
            if is_formula_like(value) and not value.startswith(("[", "(")):
                shown = value.replace("\r", "\\r").replace("\n", "\\n")     # the error stays one line
                raise MsprobeError(f"Malicious value [{shown}] not allowed to be written into {path}.")
