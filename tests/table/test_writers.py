"""Writers: CSV text, XLSX types/fills/sheet split, atomic replacement, formula refusal; the reader of result
workbooks on what every writer (ours, openpyxl, XlsxWriter) writes."""

from __future__ import annotations

import math
import re
import zipfile

import openpyxl
import pytest
import xlsxwriter
from openpyxl.cell.rich_text import CellRichText, TextBlock
from openpyxl.cell.text import InlineFont

from msprobe.errors import MsprobeError
from msprobe.table import readers, xlsx_writer
from msprobe.table.cells import cell_text, number_or_none
from msprobe.table.csv_writer import write_csv
from msprobe.table.model import ResultTable
from msprobe.table.xlsx_writer import write_xlsx

from conftest import FIXTURES, fixture_pair, only_file, read_csv, run_cli


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
    # the one percent parser (graph scoring and the API read cells through it): the text's number / 100
    assert number_or_none(" 33.3% ") == 33.3 / 100 and number_or_none("0.7%") == 0.7 / 100
    assert number_or_none(math.nan) is None and number_or_none(True) is None and number_or_none("%") is None
    assert number_or_none(3) == 3.0 and number_or_none("-inf") == -math.inf


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


# -- the reader ------------------------------------------------------------------------------------------------
HEADER = ["NPU Name", "Max diff", "Requires_grad Consistent", "Err_message", "NPU_Stack_Info"]
NAMES = [f"Distributed.all_reduce.{i}.forward.output.0" for i in range(3)] + \
    ["Functional.linear.0.forward.input.0", "Torch.add.0.forward.output.0"]
ROWS = [[NAMES[0], 0.5, True, "a & b <c> \"q\" 'x' \u00e9\u4e2d", "File x.py, line 3\n y = f(x)" * 8],
        [NAMES[1], 3, False, " leading and trailing ", None],
        [NAMES[2], -1.25e-07, True, None, "s" * 100],
        [NAMES[3], None, None, "<color rgb=\"FF\"/> is text", "[]"],
        [NAMES[4], 12, True, "last", "t" * 70]]


def _rich(text: str):
    """Text split into a red run and a plain run (what a user colouring part of a cell saves)."""
    middle = max(1, len(text) // 2)
    return CellRichText(TextBlock(InlineFont(color="FFFF0000", b=True), text[:middle]), text[middle:])


def _openpyxl_book(path, rich: bool, rows=ROWS):
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(HEADER)
    for row in rows:
        cells = list(row)
        if rich:
            cells[0] = _rich(cells[0])                          # the name itself, coloured
            cells[3] = _rich(cells[3]) if cells[3] else None     # and a message cell before the stack
        sheet.append(cells)
    book.save(path)


def _xlsxwriter_book(path, rich: bool, rows=ROWS):
    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet()
    red = book.add_format({"color": "red", "bold": True})
    sheet.write_row(0, 0, HEADER)
    for number, row in enumerate(rows, start=1):
        for column, value in enumerate(row):
            if value is None:
                continue
            if rich and column in (0, 3) and len(value) > 1:
                middle = max(1, len(value) // 2)
                sheet.write_rich_string(number, column, red, value[:middle], value[middle:])
            else:
                sheet.write(number, column, value)
    book.close()


def _rewrite_sheet(path, change):
    """The workbook with its first worksheet's XML passed through change (a function of the text)."""
    with zipfile.ZipFile(path) as source:
        members = {name: source.read(name) for name in source.namelist()}
    members["xl/worksheets/sheet1.xml"] = change(members["xl/worksheets/sheet1.xml"].decode()).encode()
    with zipfile.ZipFile(path, "w") as target:
        for name, data in members.items():
            target.writestr(name, data)


def _without_references(text: str) -> str:
    return re.sub(r'(<c\b[^>]*?) r="[A-Z]+\d+"', r"\1", text)


def _prefixed(text: str) -> str:
    """Every element of the sheet in a prefixed namespace (`<x:row>`), as some .NET writers save it."""
    text = text.replace('xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"',
                        'xmlns:x="http://schemas.openxmlformats.org/spreadsheetml/2006/main"')
    return re.sub(r"<(/?)(?![?!])([A-Za-z]+)(?=[\s>/])", r"<\1x:\2", text)


def _with_comments_and_cdata(text: str) -> str:
    text = text.replace("<t>last</t>", "<t><![CDATA[last]]></t>")
    return re.sub(r"(<row\b[^>]*>)", r'\1<!-- <c r="A1" t="inlineStr"><is><t>fake</t></is></c> -->', text)


def _ours(path, rich: bool, rows=ROWS):
    columns = {name: [row[i] for row in rows] for i, name in enumerate(HEADER)}
    write_xlsx(ResultTable(columns=list(HEADER), cells=columns, numeric_columns=frozenset({"Max diff"})), str(path),
               highlight_column=None)


# Without r= every cell must be written, so those workbooks have no empty cell.
DENSE = [[v if v is not None else "-" for v in row] for row in ROWS]
WRITERS = {
    "msprobe": (_ours, False, None, [[("None" if v is None else v) for v in row] for row in ROWS]),
    "openpyxl": (_openpyxl_book, False, None, ROWS),
    "openpyxl rich text": (_openpyxl_book, True, None, ROWS),
    "openpyxl without r=": (_openpyxl_book, True, _without_references, DENSE),
    "xlsxwriter shared strings": (_xlsxwriter_book, False, None, ROWS),
    "xlsxwriter rich text": (_xlsxwriter_book, True, None, ROWS),
    "xlsxwriter without r=": (_xlsxwriter_book, True, _without_references, DENSE),
    "namespace prefixes": (_openpyxl_book, True, _prefixed, ROWS),
    "comments and CDATA": (_openpyxl_book, False, _with_comments_and_cdata, ROWS),
}


def _padded(rows: list) -> list:
    return [list(row) + [None] * (len(HEADER) - len(row)) for row in rows]


@pytest.mark.parametrize("kind", list(WRITERS))
def test_reader_reads_every_writer_as_openpyxl_does(kind, tmp_path):
    """Rows, names and cells of plain, shared-string and (coloured) rich-text workbooks, with or without cell
    references: all of them, those selected by name and only the asked columns, as written (and as openpyxl
    reads them)."""
    make, rich, change, written = WRITERS[kind]
    path = tmp_path / "book.xlsx"
    make(path, rich, written)
    if change:
        _rewrite_sheet(path, change)
    assert _padded(list(openpyxl.load_workbook(path).active.iter_rows(values_only=True))) == [HEADER] + written
    header, rows = readers.read_xlsx(str(path))
    assert header == HEADER and _padded(rows) == written
    header, rows = readers.read_xlsx(str(path), lambda name: "Distributed.all_reduce." in name)
    assert _padded(rows) == written[:3]
    header, rows = readers.read_xlsx(str(path), lambda name: name.endswith("input.0"), {"Max diff"})
    assert _padded(rows) == [[NAMES[3], written[3][1], None, None, None]]


def test_reader_refuses_a_document_type_declaration(tmp_path):
    path = tmp_path / "book.xlsx"
    _openpyxl_book(path, False)
    _rewrite_sheet(path, lambda text: text.replace("<worksheet", '<!DOCTYPE w [<!ENTITY e "x">]><worksheet', 1))
    with pytest.raises(MsprobeError, match="document type declaration"):
        readers.read_xlsx(str(path))


def test_reader_leaves_phonetic_runs_out_of_shared_strings():
    data = ('<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><si><t>plain</t></si><si/>'
            '<si><r><rPr><color rgb="FFFF0000"/></rPr><t>ri</t></r><r><t xml:space="preserve">ch </t></r>'
            '<rPh sb="0" eb="1"><t>PHONETIC</t></rPh><phoneticPr fontId="1"/></si><si><t>a &amp;lt; b</t></si></sst>')
    assert readers._shared_strings(data.encode(), "x.xlsx") == ["plain", "", "rich ", "a &lt; b"]


HOSTILE_PARTS = {
    # issue 28: each made a lazy pattern of the reader scan to the end of the text from every element start
    "shared strings never closed": ("xl/sharedStrings.xml", b"<sst>" + b"<si>" * 100_000 + b"</sst>"),
    "text runs never closed": ("xl/sharedStrings.xml", b"<sst><si>" + b"<t>" * 100_000 + b"</si></sst>"),
    "cells never closed": ("sheet", b'<sheetData><row r="1">' + b"<c>" * 100_000 + b"</row></sheetData>"),
    "values never closed": ("sheet", b'<sheetData><row r="1"><c r="A1"><x/>' + b"<v>" * 100_000
                            + b"</c></row></sheetData>"),
    "rows never closed": ("sheet", b"<sheetData>" + b"<row " * 100_000),
}


@pytest.mark.parametrize("part", list(HOSTILE_PARTS))
def test_reader_reads_a_hostile_workbook_in_linear_time(tmp_path, part):
    """Every pattern the reader applies to a workbook runs in linear time: a part built of 100,000 element starts
    that never close is refused (or read) in a few seconds of CPU at most, where it took hours (quadratic). CPU time
    of this process, not wall time: a loaded machine must not fail it, and a quadratic pattern still would."""
    import time

    path = tmp_path / "book.xlsx"
    _openpyxl_book(path, False)
    member, content = HOSTILE_PARTS[part]
    if member == "sheet":
        _rewrite_sheet(path, lambda text: re.sub(r"<sheetData>.*</sheetData>", content.decode(), text, flags=re.S))
    else:
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(member, content)
    started = time.process_time()
    try:
        readers.read_xlsx(str(path))
    except MsprobeError as exc:
        assert "not a readable xlsx workbook" in str(exc) or "not well-formed" in str(exc), exc
    assert time.process_time() - started < 5.0


# -- every workbook the project writes ----------------------------------------------------------------------------
def _fills(path) -> set:
    """(sheet, colour) of the filled rows of a workbook, as openpyxl reads it."""
    book = openpyxl.load_workbook(path)
    return {(sheet.title, row[0].fill.fgColor.rgb) for sheet in book for row in sheet.iter_rows(min_row=2)
            if row[0].fill.fill_type == "solid"}


@pytest.mark.slow
def test_every_workbook_the_project_writes_opens_in_openpyxl(tmp_path, multirank_step0):
    """compare, kernel compare (--rank/--step: its fills were '#FF0000', which openpyxl refuses) and merge_result
    write workbooks that openpyxl opens, with their aRGB fills."""
    import tarfile

    import numpy as np

    target, golden = fixture_pair("stats_L1_step0")
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "compare", "-c"]) == 0
    assert ("Sheet1", "FFFF0000") in _fills(only_file(tmp_path / "compare", "compare_result_*.xlsx"))

    with tarfile.open(FIXTURES / "kernel_l2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    kernel = tmp_path / "kernel_l2"
    data = kernel / "golden" / "rank_0" / "Net" / "0" / "0"
    noisy = sorted(p for p in data.glob("*.npy") if np.load(p).ndim >= 2)[0]
    np.save(noisy, -np.load(noisy))                       # a "No" row
    assert run_cli(["compare", "-tp", kernel / "target", "-gp", kernel / "golden", "-o", tmp_path / "kernel",
                    "--rank", "0", "--step", "0"]) == 0
    assert _fills(only_file(tmp_path / "kernel", "compare_result_0_0_*.xlsx")) == {("Sheet1", "FFFF0000")}

    ranks_target, ranks_golden = multirank_step0
    assert run_cli(["compare", "-tp", ranks_target, "-gp", ranks_golden, "-o", tmp_path / "ranks", "-c"]) == 0
    for path in (tmp_path / "ranks").glob("compare_result_rank*.xlsx"):
        openpyxl.load_workbook(path)
    assert run_cli(["merge_result", "-i", tmp_path / "ranks", "-o", tmp_path / "merged", "-config",
                    FIXTURES / "merge" / "merge_config.yaml"]) == 0
    book = openpyxl.load_workbook(only_file(tmp_path / "merged", "*.xlsx"))
    assert book.sheetnames == ["Max diff", "L2norm diff", "MeanRelativeErr", "Consistency"]


def test_fills_that_are_not_argb_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="aRGB"):
        write_xlsx(table(), str(tmp_path / "r.xlsx"), "Result", {"error": "#FF0000"})
    assert list(tmp_path.iterdir()) == []


CSV_TEXTS = ["plain", "", " lead", "trail ", 'quo"te', '"', "com,ma", "line\nfeed", "crlf\r\n",
             "tab\there", "中文", "emoji 😀", "semi;colon", "N/A", "1.5", " inf", "'single'", "x" * 5000, "a,b\"c\nd"]


@pytest.mark.parametrize("width", [1, 3])
def test_csv_is_byte_identical_to_csv_writer(tmp_path, width):
    """Our batched writer and the standard library's csv.writer (minimal quoting, "\\n" line ends) give the same
    bytes for the same texts, so any csv reader reads our tables as it reads csv.writer's."""
    import csv
    import io

    columns = [f"col {i}" for i in range(width - 1)] + ['last,"column"']
    rows = [[CSV_TEXTS[(r + c) % len(CSV_TEXTS)] for c in range(width)] for r in range(3 * len(CSV_TEXTS))]
    if width > 1:
        rows.append([""] * width)
    path = tmp_path / "ours.csv"
    write_csv(ResultTable(columns=columns, cells={name: [row[i] for row in rows] for i, name in enumerate(columns)},
                          text_columns=frozenset(columns)), str(path))
    expected = io.StringIO(newline="")
    writer = csv.writer(expected, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    assert path.read_bytes() == expected.getvalue().encode("utf-8")


def test_csv_quotes_a_lone_carriage_return_which_csv_writer_leaves_bare(tmp_path):
    """The one deliberate difference: csv.writer with "\n" line ends writes a field holding a lone "\r" unquoted,
    which csv.reader then splits into two rows; ours quotes it, so the row reads back whole."""
    import csv
    import io

    texts = ["carriage\rreturn", "x"]
    path = tmp_path / "r.csv"
    write_csv(ResultTable(columns=["a", "b"], cells={"a": [texts[0]], "b": [texts[1]]},
                          text_columns=frozenset(["a", "b"])), str(path))
    assert path.read_bytes() == b'a,b\n"carriage\rreturn",x\n'
    with open(path, newline="", encoding="utf-8") as handle:
        assert list(csv.reader(handle)) == [["a", "b"], texts]
    theirs = io.StringIO(newline="")
    csv.writer(theirs, lineterminator="\n").writerow(texts)
    assert theirs.getvalue() == "carriage\rreturn,x\n"

