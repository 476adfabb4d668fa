"""Write a result table as CSV (UTF-8, header row, no index column)."""

from __future__ import annotations

import math
import re

from msprobe.io import atomic_path
from msprobe.table.cells import cell_text, column_texts
from msprobe.table.model import ResultTable
from msprobe.table.safety import check_cells


def csv_text(value) -> str:
    """Cell text in CSV: float infinities are written " inf" / " -inf", as the reference msprobe writes them."""
    if type(value) is float and value in (math.inf, -math.inf):
        return " inf" if value > 0 else " -inf"
    return cell_text(value)


BATCH_ROWS = 4_000
_NEEDS_QUOTES = re.compile(r'[",\r\n]')


def _quoted_column(texts: list) -> list:
    """CSV field texts (minimal quoting, as csv.writer does); repeated texts are quoted once."""
    joined = "\x01".join(texts)
    if '"' not in joined and "," not in joined and "\n" not in joined and "\r" not in joined:
        return texts
    cache: dict = {}
    out = []
    for text in texts:
        field = cache.get(text)
        if field is None:
            field = '"' + text.replace('"', '""') + '"' if _NEEDS_QUOTES.search(text) else text
            if len(cache) < 100_000:
                cache[text] = field
        out.append(field)
    return out


def write_csv(table: ResultTable, path: str) -> None:
    """Rows are formatted and written in batches, so memory stays near the size of the table itself. A lone
    surrogate (a `\ud800` escape in a dump), which UTF-8 cannot hold, is written as the six characters `\ud800`."""
    check_cells(table, {name: column_texts(table.cells[name]) for name in table.columns_to_check()}, path)
    rows = len(table)
    with atomic_path(path) as temporary, \
            open(temporary, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(",".join(_quoted_column(list(table.columns))) + "\n")
        for start in range(0, rows, BATCH_ROWS):
            stop = min(start + BATCH_ROWS, rows)
            columns = [_quoted_column(column_texts(table.cells[name][start:stop], csv_text)) for name in table.columns]
            if len(columns) == 1:   # a row of one empty field is `""`, as csv.writer writes it (not a blank line)
                columns = [['""' if text == "" else text for text in columns[0]]]
            handle.write("\n".join(map(",".join, zip(*columns))) + "\n")
