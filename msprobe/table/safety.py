"""The one formula check of msprobe (spec §7.3-7.4, docs/security.md): texts a spreadsheet could run as formulas.

A spreadsheet evaluates a cell that starts with `=`, `+`, `-` or `@` (or their full-width forms `＝ ＋ － ＠`,
which some CJK versions take for them); a CSV opened where `;` is the list separator splits a text at `;`, so a
part after a `;` is a cell start too. Numbers such as `-1.5`, `-inf` or `1;-2` are no formulas. The reference
msprobe refuses `%` as well; no spreadsheet runs a cell starting with `%`, and a Python stack line such as
`print("loss %s;%s" % ...)` must not refuse a compare, so `%` is not a formula start here.
"""

from __future__ import annotations

import re

from msprobe.errors import MsprobeError
from msprobe.names import printable

_STARTS = "=+\\-@\uff1d\uff0b\uff0d\uff20"
_FORMULA_START = re.compile(f"^[{_STARTS}]|;[{_STARTS}]")
_ANY_START = re.compile(f"[;\n][{_STARTS}]")     # in "\n" + the texts joined by "\n": a line start or a `;` part


def is_formula_like(text: str) -> bool:
    """True when text could be taken for a spreadsheet formula (numbers such as -1.5 are fine)."""
    if not _FORMULA_START.search(text):
        return False
    for part in text.split(";"):
        try:
            float(part)
        except ValueError:
            return True
    return False


def first_formula(texts: list) -> str | None:
    """The first of `texts` that is formula-like, or None. The distinct texts are scanned at once first (the usual
    answer is none; a column repeats its texts, a stack on every row of its entry); only on a hit is each looked at
    alone."""
    if not texts:
        return None
    distinct = list(dict.fromkeys(texts)) if len(texts) > 1 else texts
    if not _ANY_START.search("\n" + "\n".join(distinct)):
        return None
    return next((text for text in texts if is_formula_like(text)), None)


def check_cells(table, texts: dict, path: str) -> None:
    """Refuse to write `path` when a column name or a text cell of the table (texts: column -> cell texts, for the
    columns the table says to check) could run as a formula; the error names the cell's row and column."""
    bad = first_formula(list(table.columns))
    if bad is not None:
        raise MsprobeError(f"Malicious value [{printable(bad)}] not allowed to be written into {path}.")
    for name in table.columns_to_check():
        column = texts[name]
        bad = first_formula(column)
        if bad is not None:
            row = column.index(bad)
            first = table.columns[0]
            where = f"column {name}, row {row + 1}" + (f" ({first} {printable(texts[first][row])})"
                                                      if first in texts and first != name else "")
            raise MsprobeError(f"Malicious value [{printable(bad)}] not allowed to be written into {path} "
                               f"({where}).")

