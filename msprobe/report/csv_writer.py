"""Write a result table as CSV (UTF-8, header row, no index column)."""

from __future__ import annotations

import csv
import math

from msprobe.report.atomic import atomic_path
from msprobe.report.cells import cell_text, column_texts
from msprobe.report.safety import check_cells
from msprobe.report.table import ResultTable


def csv_text(value) -> str:
    """Cell text in CSV: float infinities are written " inf" / " -inf", as the reference msprobe writes them."""
    if type(value) is float and value in (math.inf, -math.inf):
        return " inf" if value > 0 else " -inf"
    return cell_text(value)


BATCH_ROWS = 20_000


def write_csv(table: ResultTable, path: str) -> None:
    """Rows are formatted and written in batches, so memory stays near the size of the table itself."""
    check_cells(table, {name: column_texts(table.cells[name]) for name in table.columns_to_check()}, path)
    rows = len(table)
    with atomic_path(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(table.columns)
        for start in range(0, rows, BATCH_ROWS):
            stop = min(start + BATCH_ROWS, rows)
            writer.writerows(zip(*(column_texts(table.cells[name][start:stop], csv_text) for name in table.columns)))
