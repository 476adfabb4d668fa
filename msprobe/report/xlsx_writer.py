"""Write a result table as XLSX with XlsxWriter in constant-memory mode; error rows red, warning rows yellow."""

from __future__ import annotations

import math

from msprobe.report.atomic import atomic_path
from msprobe.report.cells import cell_text
from msprobe.report.safety import check_cells
from msprobe.report.table import ResultTable

MAX_SHEET_ROWS = 1_048_500   # above this the table is split into sheets part_1, part_2, ...
MAX_CELL_CHARS = 32_767      # Excel's limit for one cell
RED = "#FF0000"
YELLOW = "#FFFF00"


VERDICT_FILLS = {"error": RED, "warning": YELLOW}


def write_xlsx(table: ResultTable, path: str, highlight_column: str | None = "Result",
               fills_by_value: dict | None = None) -> None:
    """fills_by_value maps a value of highlight_column to the fill colour of its row (default: Result)."""
    import xlsxwriter

    texts = {name: [v if type(v) is str else cell_text(v) for v in table.cells[name]] for name in table.columns}
    check_cells(table, texts, path)
    rows = len(table)
    highlight = table.cells.get(highlight_column) if highlight_column else None
    with atomic_path(path) as temporary:
        workbook = xlsxwriter.Workbook(temporary, {"constant_memory": True, "strings_to_numbers": False,
                                                   "strings_to_formulas": False, "strings_to_urls": False,
                                                   "nan_inf_to_errors": False})
        header = workbook.add_format({"bold": True})
        fills = {value: workbook.add_format({"bg_color": color})
                 for value, color in (fills_by_value or VERDICT_FILLS).items()}
        sheets = [("Sheet1", 0, rows)] if rows <= MAX_SHEET_ROWS else [
            (f"part_{i + 1}", start, min(start + MAX_SHEET_ROWS, rows))
            for i, start in enumerate(range(0, rows, MAX_SHEET_ROWS))]
        columns = [(name, table.cells[name], texts[name], name in table.numeric_columns) for name in table.columns]
        for sheet_name, start, stop in sheets:
            sheet = workbook.add_worksheet(sheet_name)
            sheet.write_row(0, 0, table.columns, header)
            for out_row, row in enumerate(range(start, stop), start=1):
                fmt = fills[highlight[row]] if highlight is not None and highlight[row] in fills else None
                for col, (_name, raw, text, numeric) in enumerate(columns):
                    value = raw[row]
                    kind = type(value)
                    if kind is bool:
                        sheet.write_boolean(out_row, col, value, fmt)
                        continue
                    if numeric and (kind is float or kind is int) and math.isfinite(value):
                        sheet.write_number(out_row, col, value, fmt)
                        continue
                    cell = text[row]
                    if len(cell) > MAX_CELL_CHARS:
                        cell = cell[:MAX_CELL_CHARS - 3] + "..."
                    sheet.write_string(out_row, col, cell, fmt)
        workbook.close()
