"""Read result tables back (csv or xlsx), fast, keeping only the rows a caller asks for.

Large workbooks are not parsed cell by cell: rows are found by searching the sheet XML for the wanted
texts, and only those rows are decoded. Shared and inline strings, numbers and booleans are supported."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from html import unescape

from msprobe.errors import MsprobeError

MAX_MEMBER_BYTES = 1024 ** 3          # any single member above 1 GiB uncompressed is refused (zip bombs)
MAX_TOTAL_BYTES = 10 * 1024 ** 3

_ATTR_R = re.compile(r'\br="([A-Z]+)\d*"')
_ATTR_T = re.compile(r'\bt="(\w+)"')
_VALUE = re.compile(r"<v>(.*?)</v>", re.S)
_TEXT = re.compile(r"<t[^>]*>(.*?)</t>", re.S)
_SHARED = re.compile(r"<si>(.*?)</si>", re.S)
_SHEET_TARGET = re.compile(r'<Relationship\b[^>]*Target="([^"]*worksheets/[^"]*)"')


def _column_index(letters: str) -> int:
    index = 0
    for char in letters:
        index = index * 26 + ord(char) - 64
    return index - 1


def _decode_cell(attributes: str, body: str | None, shared: list | None):
    kind = _ATTR_T.search(attributes)
    kind = kind.group(1) if kind else "n"
    if body is None:
        return None
    if kind == "inlineStr":
        return unescape("".join(_TEXT.findall(body)))
    value = _VALUE.search(body)
    if value is None:
        return None
    text = value.group(1)
    if kind == "s":
        return shared[int(text)] if shared is not None else text
    if kind == "b":
        return text == "1"
    if kind in ("str", "e"):
        return unescape(text)
    try:
        number = float(text)
    except ValueError:
        return unescape(text)
    return int(number) if number.is_integer() and "." not in text and "E" not in text.upper() else number


def _decode_row(row_xml: str, shared: list | None, columns: set | None = None) -> list:
    """Cell values of one row; with `columns`, other columns (except the name, column 0) stay None.
    The row is split on "<c" (text never holds a raw "<"), so only the needed cells are parsed."""
    cells: list = []
    for piece in row_xml.split("<c")[1:]:
        close = piece.find(">")
        if close < 0:
            continue
        if piece[close - 1] == "/":
            attributes, body = piece[:close - 1], None
        else:
            attributes = piece[:close]
            end = piece.rfind("</c")
            body = piece[close + 1:end if end >= 0 else len(piece)]
        if 'r="' in attributes:
            reference = _ATTR_R.search(attributes)
            index = _column_index(reference.group(1)) if reference else len(cells)
        else:
            index = len(cells)
        while len(cells) < index:
            cells.append(None)
        if columns is None or index in columns or index == 0:
            cells.append(_decode_cell(attributes, body, shared))
        else:
            cells.append(None)
    return cells


def _check_zip(archive: zipfile.ZipFile, path: str) -> None:
    total = 0
    for info in archive.infolist():
        if info.filename.startswith("/") or ".." in info.filename.split("/"):
            raise MsprobeError(f"{path}: the workbook holds an unsafe member name {info.filename!r}.")
        if info.file_size > MAX_MEMBER_BYTES:
            raise MsprobeError(f"{path}: a workbook member is larger than 1 GiB uncompressed; refused.")
        total += info.file_size
    if total > MAX_TOTAL_BYTES:
        raise MsprobeError(f"{path}: the workbook is larger than 10 GiB uncompressed; refused.")


def read_xlsx(path: str, wanted: tuple = (), columns: set | None = None) -> tuple[list, list]:
    """(header, rows) of every sheet of a workbook; with `wanted`, only rows whose first cell contains one of
    the wanted texts are decoded (the header comes from the first sheet); with `columns` (names), only those
    cells are decoded, the others are None."""
    try:
        with zipfile.ZipFile(path) as archive:
            _check_zip(archive, path)
            names = set(archive.namelist())
            shared = None
            if "xl/sharedStrings.xml" in names:
                shared = [unescape("".join(_TEXT.findall(item)))
                          for item in _SHARED.findall(archive.read("xl/sharedStrings.xml").decode("utf-8"))]
            sheets = []
            if "xl/_rels/workbook.xml.rels" in names:
                rels = archive.read("xl/_rels/workbook.xml.rels").decode("utf-8")
                sheets = ["xl/" + t.lstrip("/").removeprefix("xl/") for t in _SHEET_TARGET.findall(rels)]
            sheets = [s for s in sheets if s in names] or sorted(n for n in names if n.startswith("xl/worksheets/"))
            header: list = []
            rows: list = []
            for number, sheet in enumerate(sheets):
                sheet_header, sheet_rows = _sheet_rows(archive.read(sheet), wanted, shared, columns)
                if number == 0:
                    header = sheet_header
                rows.extend(sheet_rows)
            return header, rows
    except (zipfile.BadZipFile, EOFError, KeyError, zlib_error(), UnicodeDecodeError) as exc:
        raise MsprobeError(f"{path} is not a readable xlsx workbook ({type(exc).__name__}: {exc}).") from None


def zlib_error():
    import zlib

    return zlib.error


def _sheet_rows(data: bytes, wanted: tuple, shared: list | None, columns: set | None = None) -> tuple[list, list]:
    """Header and rows of one sheet's XML; with `wanted`, rows are located by searching the raw bytes and only
    those rows are decoded."""
    start = data.find(b"<row")
    if start < 0:
        return [], []
    end = data.find(b"</row>", start)
    header = [c if c is not None else "" for c in _decode_row(data[start:end].decode("utf-8"), shared)]
    indices = {i for i, name in enumerate(header) if name in columns} if columns is not None else None
    rows = []
    first_data = data.find(b"<row", end)
    first_cell = data[first_data:data.find(b">", data.find(b"<c", first_data)) + 1] if first_data >= 0 else b""
    names_shared = shared is not None and b't="s"' in first_cell
    if not wanted or names_shared:       # names stored as shared strings: they are not in the sheet text
        position = end
        while True:
            begin = data.find(b"<row", position)
            if begin < 0:
                break
            stop = data.find(b"</row>", begin)
            row = _decode_row(data[begin:stop].decode("utf-8"), shared, indices)
            if not wanted or (row and isinstance(row[0], str) and any(w in row[0] for w in wanted)):
                rows.append(row)
            position = stop
        return header, rows
    spans: set = set()
    for key in wanted:
        position = end
        escaped = key.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").encode("utf-8")
        while True:
            found = data.find(escaped, position)
            if found < 0:
                break
            begin = data.rfind(b"<row", 0, found)
            stop = data.find(b"</row>", found)
            spans.add((begin, stop))
            position = stop
    for begin, stop in sorted(spans):
        row = _decode_row(data[begin:stop].decode("utf-8"), shared, indices)
        if row and isinstance(row[0], str) and any(w in row[0] for w in wanted):
            rows.append(row)
    return header, rows


def read_csv_table(path: str, wanted: tuple = ()) -> tuple[list, list]:
    """(header, rows) of a csv result; with `wanted`, only lines containing a wanted text are parsed."""
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except UnicodeDecodeError:
        raise MsprobeError(f"{path} is not a UTF-8 csv file.") from None
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))   # a cell (a long stack) is at most the file
    first_end = text.find("\n")
    header = next(csv.reader([text[: first_end if first_end >= 0 else len(text)]]), [])
    if not wanted:
        rows = list(csv.reader(io.StringIO(text)))[1:]
    else:
        lines = [line for line in text[first_end + 1:].split("\n") if any(w in line for w in wanted)]
        rows = list(csv.reader(lines))
        if any(len(row) != len(header) for row in rows):   # quoted newlines: parse the whole file
            rows = [row for row in list(csv.reader(io.StringIO(text)))[1:] if row and any(w in row[0] for w in wanted)]
        rows = [row for row in rows if row and any(w in row[0] for w in wanted)]
    return header, rows


def read_table(path: str, wanted: tuple = (), columns: set | None = None) -> tuple[list, list]:
    """(header, rows) of a csv or xlsx result (`columns` limits what an xlsx decodes)."""
    if path.lower().endswith(".csv"):
        return read_csv_table(path, wanted)
    return read_xlsx(path, wanted, columns)
