"""Write a result table as CSV (UTF-8, header row, no index column)."""

from __future__ import annotations

import csv
import math

from msprobe.report.atomic import atomic_path
from msprobe.report.cells import cell_text
from msprobe.report.safety import check_cells
from msprobe.report.table import ResultTable


def csv_text(value) -> str:
    """Cell text in CSV: float infinities are written " inf" / " -inf", as the reference msprobe writes them."""
    if type(value) is float and value in (math.inf, -math.inf):
        return " inf" if value > 0 else " -inf"
    return cell_text(value)


def table_texts(table: ResultTable) -> dict:
    return {name: [v if type(v) is str else csv_text(v) for v in table.cells[name]] for name in table.columns}


def write_csv(table: ResultTable, path: str) -> None:
    texts = table_texts(table)
    check_cells(table, texts, path)
    with atomic_path(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(table.columns)
        writer.writerows(zip(*(texts[name] for name in table.columns)))
