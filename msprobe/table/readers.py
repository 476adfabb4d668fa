"""Read result tables back (csv or xlsx), fast, keeping only the rows a caller selects by their name.

xlsx: a sheet is not parsed cell by cell. Its row elements are found by scanning the sheet XML, the name (first
cell) of each row is read from the row's first cell element, and only the selected rows are decoded, element by
element (`<c>`, `<v>`, `<is>`, `<t>`: never a prefix of another tag, so rich text runs such as `<color>` are not
taken for cells). Inline and shared strings (plain or rich text, phonetic runs left out), numbers, booleans and
formula results are read, with or without `r=` references. A sheet written with namespace prefixes, comments,
CDATA or processing instructions is parsed with xml.etree instead; a part holding a DTD is refused."""

from __future__ import annotations

import csv
import io
import re
import zipfile
import zlib
from html import unescape
from xml.etree import ElementTree

from msprobe.errors import MsprobeError

MAX_MEMBER_BYTES = 1024 ** 3          # any single member above 1 GiB uncompressed is refused (zip bombs)
MAX_TOTAL_BYTES = 10 * 1024 ** 3
MAX_COLUMNS = 16_384                  # Excel's last column, XFD

_ROW = re.compile(rb"<row(?=[\s>/])[^>]*>")                  # a row's start tag, or the whole of an empty row
# One <c> element: its column letters and type in the usual attribute order r, s, t (groups 1, 2), or any other
# attributes (3); then a plain <v> (4), a plain inline string (5) or any other content (6). `<c` followed by a
# letter (`<color>` of rich text, `<cols>`) is another element and never matches.
_CELL_PATTERN = (r'<c(?:(?:\s+r="([A-Za-z]{1,3})\d*")?(?:\s+s="\d*")?(?:\s+t="(\w+)")?\s*|(?=[\s>/])([^>]*?))'
                 r'(?:/>|>(?:<v>([^<]*)</v>|<is><t(?:\s+xml:space="preserve")?>([^<]*)</t></is>|(.*?))</c>)')
_CELL = re.compile(_CELL_PATTERN, re.S)
_FIRST_CELL = re.compile(r"\s*".encode() + _CELL_PATTERN.encode(), re.S)
_ITEM = re.compile(r"<si(?=[\s>/])[^>]*?(?:/>|>(.*?)</si>)", re.S)
_ATTR_R = re.compile(r"""\br\s*=\s*["']([A-Za-z]+)""")
_ATTR_T = re.compile(r"""\bt\s*=\s*["'](\w+)""")
_VALUE = re.compile(r"<v(?:\s[^>]*)?>(.*?)</v>", re.S)
_TEXT = re.compile(r"<t(?=[\s>])[^>]*(?<!/)>(.*?)</t>", re.S)
_PHONETIC = re.compile(r"<rPh(?=[\s>]).*?</rPh>", re.S)
_ELEMENT_START = re.compile(rb"<[A-Za-z_]")
# Element starts whose content a pattern above reads lazily up to a closing tag (`(.*?)</si>`, ...): a start
# with no closing tag after it makes the pattern scan to the end of the text, from every such start.
_SI_START, _C_START = re.compile(r"<si(?=[\s>/])"), re.compile(r"<c(?=[\s>/])")
_T_START, _V_START, _RPH_START = re.compile(r"<t(?=[\s>])"), re.compile(r"<v(?=[\s>])"), re.compile(r"<rPh(?=[\s>])")
_NS = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_RELS_NS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_DOC_RELS = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"


def _unclosed(text: str, start: re.Pattern, closing: str, self_closing: bool = True) -> bool:
    """True when an element that `start` finds comes after the last `closing` tag and does not close itself
    (`.../>`, when self_closing): the patterns of this module would scan from it to the end of the text, and a
    file of thousands of such starts would take hours. Well-formed XML has none; the callers hand such text to the
    XML parser (linear, and it names the fault) or refuse it. One pass: linear in the text."""
    last = text.rfind(closing)
    position = last + len(closing) if last >= 0 else 0
    end = -1
    for found in start.finditer(text, position):
        if end < found.end():
            end = text.find(">", found.end())
        if end < 0 or not self_closing or text[end - 1] != "/":
            return True
    return False


def _column_index(letters: str) -> int:
    index = 0
    for char in letters.upper():
        index = index * 26 + ord(char) - 64
    if index > MAX_COLUMNS:
        raise MsprobeError(f"a cell reference names column {letters}, beyond Excel's last column XFD.")
    return index - 1


def _text(raw: str) -> str:
    """XML character data as text: line ends normalised, entities and character references resolved."""
    if "\r" in raw:
        raw = raw.replace("\r\n", "\n").replace("\r", "\n")
    return unescape(raw) if "&" in raw else raw


def _string_item(xml: str) -> str:
    """The text of an `<is>` or `<si>` body: its `<t>` elements, plain or in rich-text runs, without phonetic runs."""
    if _unclosed(xml, _T_START, "</t>") or ("<rPh" in xml and _unclosed(xml, _RPH_START, "</rPh>", False)):
        raise MsprobeError("a string of the workbook is not well-formed XML: a <t> or <rPh> element is never closed.")
    if "<rPh" in xml:
        xml = _PHONETIC.sub("", xml)
    return _text("".join(_TEXT.findall(xml)))


def _value(kind: str, value: str | None, shared: list | None):
    """A cell's value from its type and its `<v>` text (already unescaped)."""
    if value is None:
        return None
    if kind == "s":
        if shared is None:
            return value
        try:
            return shared[int(value)]
        except (ValueError, IndexError):
            raise MsprobeError(f"a cell refers to shared string {value!r}, which the workbook does not hold.") \
                from None
    if kind == "b":
        return value == "1"
    if kind in ("str", "e", "d", "inlineStr"):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "E" not in value.upper() else number


def _cell(groups: tuple, shared: list | None, decode: bool = True) -> tuple:
    """(column letters or None, value) of one _CELL match; with decode False only the letters (value None)."""
    letters, kind, attributes, value, inline, body = groups
    if attributes is not None:
        reference, kind = _ATTR_R.search(attributes), _ATTR_T.search(attributes)
        letters, kind = reference and reference.group(1), kind and kind.group(1)
    if not decode:
        return letters, None
    if kind == "inlineStr":
        if inline is None:
            return letters, _string_item(body) if body is not None else None
        return letters, _text(inline)
    if value is None and body is not None:
        if _unclosed(body, _V_START, "</v>", False):
            raise MsprobeError("a cell of the workbook is not well-formed XML: a <v> element is never closed.")
        found = _VALUE.search(body)
        value = found and found.group(1)
    return letters, _value(kind or "n", _text(value) if value is not None else None, shared)


def _put(cells: list, index: int, value) -> None:
    """Set cell `index` of a row: cells in between are None, a repeated reference keeps the last value."""
    if index == len(cells):
        cells.append(value)
    elif index > len(cells):
        cells.extend([None] * (index - len(cells)))
        cells.append(value)
    else:
        cells[index] = value


def _decode_row(row_xml: str, shared: list | None, columns: set | None = None) -> list:
    """Cell values of one row's XML, by column; with `columns`, other columns (except the name, column 0) are None."""
    cells: list = []
    for match in _CELL.finditer(row_xml):
        letters, value = _cell(match.groups(), shared, columns is None)
        index = _column_index(letters) if letters else len(cells)
        if columns is not None and (index == 0 or index in columns):
            value = _cell(match.groups(), shared)[1]
        _put(cells, index, value)
    return cells


def _first_cell(data: bytes, position: int, stop: int, shared: list | None) -> tuple[bool, object]:
    """(found, name) of the row whose content is data[position:stop]: its first cell when that is column A."""
    match = _FIRST_CELL.match(data, position, stop)
    if match is None:
        return False, None
    letters, kind, attributes, value, inline, body = match.groups()
    if attributes is None and body is None and (letters is None or letters in (b"A", b"a")):
        if inline is not None:                               # the usual name cell: a plain inline string
            return True, _text(inline.decode("utf-8")) if kind == b"inlineStr" else None
        if kind == b"s" and value is not None and shared is not None:
            return True, _value("s", value.decode("ascii", "replace"), shared)
    letters, value = _cell(tuple(g if g is None else g.decode("utf-8") for g in match.groups()), shared)
    return True, (value if not letters or letters.upper() == "A" else None)


def _refuse_dtd(data: bytes, member: str, path: str) -> None:
    """A document type declaration (the only place entities can be defined) comes before the root element."""
    root = _ELEMENT_START.search(data)
    if data.find(b"<!DOCTYPE", 0, root.start() if root else len(data)) >= 0:
        raise MsprobeError(f"{path}: {member} holds a document type declaration; refused.")


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


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _sheet_members(archive: zipfile.ZipFile, names: set, path: str) -> list:
    """The worksheet members in workbook order (workbook.xml and its relationships), else by name."""
    found = []
    if "xl/workbook.xml" in names and "xl/_rels/workbook.xml.rels" in names:
        workbook, rels = archive.read("xl/workbook.xml"), archive.read("xl/_rels/workbook.xml.rels")
        _refuse_dtd(workbook, "xl/workbook.xml", path)
        _refuse_dtd(rels, "xl/_rels/workbook.xml.rels", path)
        targets = {r.get("Id"): r.get("Target", "") for r in ElementTree.fromstring(rels).iter(f"{_RELS_NS}Relationship")}
        for sheet in ElementTree.fromstring(workbook).iter(f"{_NS}sheet"):
            target = targets.get(sheet.get(_DOC_RELS), "")
            member = target.lstrip("/") if target.startswith("/") else "xl/" + target
            if member in names:
                found.append(member)
    return found or sorted(n for n in names if n.startswith("xl/worksheets/") and n.endswith(".xml"))


def read_xlsx(path: str, select=None, columns: set | None = None) -> tuple[list, list]:
    """(header, rows) of every sheet of a workbook (the header from the first sheet); with `select` (a function of
    a row's name, its first cell), only the rows it accepts are decoded; with `columns` (names), only those cells
    are decoded, the others are None."""
    try:
        with zipfile.ZipFile(path) as archive:
            _check_zip(archive, path)
            names = set(archive.namelist())
            shared = None
            if "xl/sharedStrings.xml" in names:
                shared = _shared_strings(archive.read("xl/sharedStrings.xml"), path)
            header: list = []
            rows: list = []
            for number, sheet in enumerate(_sheet_members(archive, names, path)):
                data = archive.read(sheet)
                _refuse_dtd(data, sheet, path)
                sheet_header, sheet_rows = _sheet_rows(data, select, shared, columns)
                if number == 0:
                    header = sheet_header
                rows.extend(sheet_rows)
            return header, rows
    except (zipfile.BadZipFile, EOFError, KeyError, zlib.error, UnicodeDecodeError, ElementTree.ParseError) as exc:
        raise MsprobeError(f"{path} is not a readable xlsx workbook ({type(exc).__name__}: {exc}).") from None


def _prefixed(data: bytes, tag: bytes) -> bool:
    """True when the part's elements carry a namespace prefix (`<x:sheetData>`): only an XML parser reads it."""
    return data.find(b"<" + tag) < 0 and data.find(b":" + tag) >= 0


def _shared_strings(data: bytes, path: str) -> list:
    _refuse_dtd(data, "xl/sharedStrings.xml", path)
    text = data.decode("utf-8")
    if _prefixed(data, b"sst") or b"<!" in data or _unclosed(text, _SI_START, "</si>"):   # comments, CDATA, faults
        return [_element_text(item) for item in ElementTree.fromstring(data) if _local(item.tag) == "si"]
    return [_string_item(body) if body else "" for body in (m.group(1) for m in _ITEM.finditer(text))]


def _sheet_rows(data: bytes, select, shared: list | None, columns: set | None = None) -> tuple[list, list]:
    """Header (first row) and the selected rows of one sheet's XML."""
    if _prefixed(data, b"sheetData"):
        return _parsed_sheet_rows(data, select, shared, columns)
    start = data.find(b"<sheetData")
    if start < 0:
        return [], []
    end = data.find(b"</sheetData>", start)
    end = len(data) if end < 0 else end
    end = data.rfind(b">", start, end) + 1       # a row start after the last '>' is none (and would be rescanned)
    header: list | None = None
    indices = None
    rows = []
    for match in _ROW.finditer(data, start, end):
        if match.group().endswith(b"/>"):
            if header is None:
                header, indices = [], set()
            continue
        begin = match.end()
        stop = data.find(b"</row>", begin, end)
        if stop < 0:
            raise MsprobeError("a row element of the sheet is not closed.")
        if header is not None and select is not None:
            found, name = _first_cell(data, begin, stop, shared)
            if found and not (isinstance(name, str) and select(name)):
                continue
        if header is None:
            header = [c if c is not None else "" for c in _row_cells(data, begin, stop, shared, None)]
            indices = {i for i, name in enumerate(header) if name in columns} if columns is not None else None
            continue
        row = _row_cells(data, begin, stop, shared, indices)
        if select is None or (row and isinstance(row[0], str) and select(row[0])):
            rows.append(row)
    return header or [], rows


def _row_cells(data: bytes, begin: int, stop: int, shared: list | None, columns: set | None) -> list:
    """The cells of the row content data[begin:stop]; content with comments or CDATA goes through the XML parser."""
    content = data[begin:stop]
    text = content.decode("utf-8")
    if b"<!" in content or b"<?" in content or _unclosed(text, _C_START, "</c>"):
        return _element_row(ElementTree.fromstring(b"<row>" + content + b"</row>"), shared, columns)
    return _decode_row(text, shared, columns)


def _element_text(item) -> str:
    """The text of an `<is>`/`<si>` element: its `<t>` children and those of its rich-text runs (`<r>`)."""
    parts = []
    for child in item:
        name = _local(child.tag)
        if name == "t":
            parts.append(child.text or "")
        elif name == "r":
            parts.extend(t.text or "" for t in child if _local(t.tag) == "t")
    return "".join(parts)


def _element_row(row, shared: list | None, columns: set | None) -> list:
    cells: list = []
    for cell in row:
        if _local(cell.tag) != "c":
            continue
        reference = cell.get("r")
        letters = reference.rstrip("0123456789") if reference else ""
        index = _column_index(letters) if letters else len(cells)
        if columns is not None and index not in columns and index != 0:
            _put(cells, index, None)
            continue
        kind = cell.get("t", "n")
        children = {_local(child.tag): child for child in cell}
        if kind == "inlineStr":
            _put(cells, index, _element_text(children["is"]) if "is" in children else None)
        else:
            value = children.get("v")
            _put(cells, index, _value(kind, (value.text or "") if value is not None else None, shared))
    return cells


def _parsed_sheet_rows(data: bytes, select, shared: list | None, columns: set | None) -> tuple[list, list]:
    """The same as _sheet_rows, for sheets that only an XML parser reads right."""
    header: list | None = None
    indices = None
    rows = []
    for _event, element in ElementTree.iterparse(io.BytesIO(data), events=("end",)):
        if _local(element.tag) != "row":
            continue
        if header is None:
            header = [c if c is not None else "" for c in _element_row(element, shared, None)]
            indices = {i for i, name in enumerate(header) if name in columns} if columns is not None else None
        else:
            row = _element_row(element, shared, indices)
            if select is None or (row and isinstance(row[0], str) and select(row[0])):
                rows.append(row)
        element.clear()
    return header or [], rows


def read_csv_text(path: str) -> str:
    """The text of a csv file: UTF-8, with or without the byte order mark a spreadsheet's 'CSV UTF-8' writes (the
    mark is not part of the first column's name); any other encoding is one error naming the file."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise MsprobeError(f"{path} is not a UTF-8 csv file.") from None


def read_csv_table(path: str, select=None, keys: tuple = ()) -> tuple[list, list]:
    """(header, rows) of a csv result; with `select`, only rows whose name (first field) it accepts. `keys`, when
    given, are texts of which every selected row holds one: lines without any are skipped unparsed."""
    text = read_csv_text(path)
    if csv.field_size_limit() < len(text) + 1:
        csv.field_size_limit(len(text) + 1)      # a cell may be as long as the file (call stacks of 3000 frames)
    try:
        first_end = text.find("\n")
        header = next(csv.reader([text[: first_end if first_end >= 0 else len(text)]]), [])
        if keys:
            lines = [line for line in text[first_end + 1:].split("\n") if any(k in line for k in keys)]
            rows = list(csv.reader(lines))
            if any(len(row) != len(header) for row in rows):   # quoted newlines: parse the whole file
                rows = list(csv.reader(io.StringIO(text)))[1:]
        else:
            rows = list(csv.reader(io.StringIO(text)))[1:]
    except csv.Error as exc:
        raise MsprobeError(f"{path} is not a readable csv file ({exc}).") from None
    if select is not None:
        rows = [row for row in rows if row and select(row[0])]
    return header, rows


def read_table(path: str, select=None, columns: set | None = None, keys: tuple = ()) -> tuple[list, list]:
    """(header, rows) of a csv or xlsx result: rows whose name `select` accepts (all without it); `columns` limits
    what an xlsx decodes, `keys` what a csv parses (see read_csv_table)."""
    if path.lower().endswith(".csv"):
        return read_csv_table(path, select, keys)
    return read_xlsx(path, select, columns)
