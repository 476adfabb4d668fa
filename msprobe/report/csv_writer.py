"""Write a result table as CSV (UTF-8, header row, no index column)."""

from __future__ import annotations

import csv

from msprobe.report.atomic import atomic_path
from msprobe.report.cells import cell_text
from msprobe.report.safety import check_cells
from msprobe.report.table import ResultTable


def table_texts(table: ResultTable) -> dict:
    return {name: [cell_text(v) for v in table.cells[name]] for name in table.columns}


def write_csv(table: ResultTable, path: str) -> None:
    texts = table_texts(table)
    check_cells(table.columns, texts, path)
    with atomic_path(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(table.columns)
        writer.writerows(zip(*(texts[name] for name in table.columns)))
