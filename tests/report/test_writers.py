"""Writers: CSV text, XLSX types/fills/sheet split, atomic replacement, formula refusal."""

from __future__ import annotations

import math

import openpyxl
import pytest

from msprobe.errors import MsprobeError
from msprobe.report import xlsx_writer
from msprobe.report.cells import cell_text, number_or_none
from msprobe.report.csv_writer import write_csv
from msprobe.report.table import ResultTable
from msprobe.report.xlsx_writer import write_xlsx

from conftest import read_csv


def table(rows=3):
    names = [f"Functional.op.{i}.forward.output.0" for i in range(rows)]
    results = ["pass", "warning", "error"] * (rows // 3) + ["pass"] * (rows % 3)
    return ResultTable(columns=["NPU Name", "NPU max", "Requires_grad Consistent", "Result"],
                       cells={"NPU Name": names, "NPU max": [1.5, math.nan, None] * (rows // 3) + [2] * (rows % 3),
                              "Requires_grad Consistent": [True] * rows, "Result": results},
                       numeric_columns=frozenset({"NPU max"}))


def test_cell_text():
    assert [cell_text(v) for v in (1.5, math.nan, math.inf, -math.inf, None, True, 3, "x", [1, 2])] == [
        "1.5", "Nan", "inf", "-inf", "None", "True", "3", "x", "[1, 2]"]
    assert number_or_none("12.5%") == 0.125 and number_or_none("N/A") is None and number_or_none("Nan") is None


def test_csv(tmp_path):
    path = tmp_path / "r.csv"
    write_csv(table(), str(path))
    assert read_csv(path) == [["NPU Name", "NPU max", "Requires_grad Consistent", "Result"],
                              ["Functional.op.0.forward.output.0", "1.5", "True", "pass"],
                              ["Functional.op.1.forward.output.0", "Nan", "True", "warning"],
                              ["Functional.op.2.forward.output.0", "None", "True", "error"]]
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def test_xlsx_types_and_fills(tmp_path):
    path = tmp_path / "r.xlsx"
    write_xlsx(table(), str(path))
    sheet = openpyxl.load_workbook(path).active
    values = list(sheet.iter_rows(min_row=2, values_only=True))
    assert values[0] == ("Functional.op.0.forward.output.0", 1.5, True, "pass")
    assert values[1][1] == "Nan" and values[2][1] == "None"
    assert [row[0].fill.fgColor.rgb for row in sheet.iter_rows(min_row=2)] == ["00000000", "FFFFFF00", "FFFF0000"]


def test_xlsx_splits_large_tables(tmp_path, monkeypatch):
    monkeypatch.setattr(xlsx_writer, "MAX_SHEET_ROWS", 4)
    path = tmp_path / "r.xlsx"
    write_xlsx(table(10), str(path))
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == ["part_1", "part_2", "part_3"]
    assert [book[n].max_row for n in book.sheetnames] == [5, 5, 3]   # header + rows
    assert book["part_2"]["A2"].value == "Functional.op.4.forward.output.0"


def test_long_cells_are_cut_to_the_excel_limit(tmp_path):
    long = ResultTable(columns=["NPU_Stack_Info"], cells={"NPU_Stack_Info": ["x" * 40000]})
    path = tmp_path / "r.xlsx"
    write_xlsx(long, str(path), highlight_column=None)
    assert len(openpyxl.load_workbook(path).active["A2"].value) == xlsx_writer.MAX_CELL_CHARS


@pytest.mark.parametrize("writer, name", [(write_csv, "r.csv"), (write_xlsx, "r.xlsx")])
def test_formula_like_cells_are_refused_and_nothing_is_left(tmp_path, writer, name):
    bad = table()
    bad.cells["NPU Name"][1] = "=HYPERLINK(\"http://x\")"
    with pytest.raises(MsprobeError, match="Malicious value"):
        writer(bad, str(tmp_path / name))
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("previous")
    broken = table()
    broken.cells["Result"] = broken.cells["Result"][:1]   # ragged: zip stops, but force a failure below
    broken.cells["NPU max"] = object()
    with pytest.raises(TypeError):
        write_csv(broken, str(path))
    assert path.read_text() == "previous" and [p.name for p in tmp_path.iterdir()] == ["r.csv"]
