"""A self-contained HTML page of a compare result: summary, metric chart, module tree and a virtualised table.

The writer computes no verdicts: it lays out the judged table (or a table read back from a .csv/.xlsx) as one
compact JSON document embedded in the page, with the script and style of msprobe/data/report inlined.

Data layout (``<script type="application/json" id="msprobe-data">``, every ``<`` escaped as ``\\u003c``)::

    columns   every column name once, in table order
    kinds     per column: "n" number, "t" index into texts, "g" part of the row group, "s" text or 0 (= same
              as the column named in base), "p" text or [k, suffix] (= the first k characters of the previous
              row's text + suffix), "r" raw value
    pct       per column: true when its numbers are percentages (cells like "12.5%")
    base      per column: index of the column a "s" column repeats, else -1
    texts     deduplicated texts (stacks, dtypes, shapes, messages...) referenced by index
    groups    distinct combinations of the "g" columns, as lists of text indexes
    rows      one array per row: [group index, then the cells of every non-"g" column in column order]
    summary   rows, matched, results, first_error, first_error_row (1-based), advice, mode, source
    tree      module tree from construct.json or null (see module_tree)

Numbers are stored with DIGITS significant digits (the table file keeps every digit)."""

from __future__ import annotations

import html
import os
from collections import Counter

import orjson

from msprobe.dump.naming import item_state
from msprobe.dump.reader import load_json, read_construct
from msprobe.errors import MsprobeError
from msprobe.io import write_text
from msprobe.log import get_logger
from msprobe.table import columns as col
from msprobe.table.cells import NA, stat_number
from msprobe.table.readers import read_table

DIGITS = 7
FORMAT = f"%.{DIGITS}g"
MAX_GROUPS = 4096               # more distinct combinations than this: low-cardinality columns become "t"
_DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "report")
_RESULT_RANK = {"pass": 0, "warning": 1, "error": 2}
METRICS = {
    "tensor": ["Cosine", "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "MaxRelativeErr", "MaxAbsErr",
               "EucDist"],
    "statistics": ["NormRelativeErr", "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr"],
    "md5": [],
}


def _text(value) -> str:
    if type(value) is str:
        return value
    if value is None:
        return "None"
    if isinstance(value, float) and value != value:
        return "Nan"
    return str(value)


def _number(value, pct: bool):
    """The stored form of a cell of a number column: a JSON number, a text, or None."""
    kind = type(value)
    if kind is int:
        if abs(value) < 2 ** 53:
            return value
        value, kind = stat_number(value), float          # beyond the float range: an infinity
    if kind is float:
        return float(FORMAT % value) if value - value == 0 else _text(value)
    if kind is str:
        text = value
        if pct:
            if not text.endswith("%"):
                return text
            text = text[:-1]
        try:
            number = float(text)
        except ValueError:
            return value
        if number - number != 0 or "_" in text:
            return value
        if not pct and "." not in text and "e" not in text and "E" not in text and abs(number) < 2 ** 53:
            return int(number)
        return float(FORMAT % number)
    if value is None:
        return None
    return _text(value)


def _is_number_text(value) -> bool:
    if type(value) is not str:
        return type(value) in (int, float)
    text = value[:-1] if value.endswith("%") else value
    try:
        float(text)
    except ValueError:
        return False
    return "_" not in text


def _column_kind(name: str, values: list, numeric: bool) -> tuple[str, bool]:
    """(kind, percent) of a column from its name and values (a sample decides for text columns)."""
    if name == col.STACK:
        return "t", False
    n = len(values)
    sample = values if n <= 2000 else values[:: max(1, n // 2000)]
    present = [v for v in sample if v is not None and v != NA]
    strings = [v for v in present if type(v) is str and _is_number_text(v)]
    # percent: most of its number texts other than zeros (`0` is written without a unit) are percentages; also in
    # a column of mostly texts, for the chart's unit
    nonzero = [v for v in strings if float(v.rstrip("%")) != 0]
    pct = name != col.NPU_NAME and sum(v.endswith("%") for v in nonzero) * 2 > len(nonzero)
    if name != col.NPU_NAME and present and (numeric or sum(map(_is_number_text, present)) >= 0.9 * len(present)):
        return "n", pct
    distinct = len(set(map(_text, sample)))
    if distinct <= 64 or distinct <= len(sample) // 20:
        return "g", pct
    return "r", pct


def encode_table(columns: list, cells: dict, numeric_columns=None) -> dict:
    """The columns/kinds/texts/groups/rows part of the page data (see the module docstring)."""
    n = len(cells[columns[0]]) if columns else 0
    kinds, pcts, bases = [], [], []
    for name in columns:
        kind, pct = _column_kind(name, cells[name], name in (numeric_columns or ()))
        base = -1
        if name == col.BENCH_NAME and col.NPU_NAME in columns:
            kind, pct, base = "s", False, columns.index(col.NPU_NAME)
        elif name == col.NPU_NAME:
            kind, pct = "p", False
        kinds.append(kind)
        pcts.append(pct)
        bases.append(base)
    texts: list = []
    index: dict = {}

    def ref(value) -> int:
        text = _text(value)
        position = index.get(text)
        if position is None:
            position = index[text] = len(texts)
            texts.append(text)
        return position

    grouped = [c for c, k in zip(columns, kinds) if k == "g"]
    groups: list = []
    group_of: list = [0] * n
    if grouped:
        seen: dict = {}
        too_many = False
        for row, key in enumerate(zip(*(cells[c] for c in grouped))):
            position = seen.get(key)
            if position is None:
                if len(seen) >= MAX_GROUPS:
                    too_many = True
                    break
                position = seen[key] = len(groups)
                groups.append([ref(v) for v in key])
            group_of[row] = position
        if too_many:        # too many combinations: reference the texts one by one
            kinds = ["t" if k == "g" else k for k in kinds]
            groups, group_of = [[]], [0] * n
    stored = []
    for name, kind, pct, base in zip(columns, kinds, pcts, bases):
        values = cells[name]
        if kind == "g":
            continue
        if kind == "n":
            stored.append([_number(v, pct) for v in values])
        elif kind == "t":
            stored.append([ref(v) for v in values])
        elif kind == "p":
            stored.append(_prefix_coded(values))
        elif kind == "s":
            same = cells[columns[base]]
            stored.append([0 if v == s else _text(v) for v, s in zip(values, same)])
        else:
            stored.append([v if type(v) in (str, int) else _text(v) for v in values])
    rows = [list(row) for row in zip(group_of, *stored)] if n else []
    return {"columns": list(columns), "kinds": kinds, "pct": pcts, "base": bases, "texts": texts,
            "groups": groups or [[]], "rows": rows}


def _prefix_coded(values: list) -> list:
    """Texts as [k, suffix] = the previous text's first k characters + suffix, when that is shorter."""
    out, previous = [], ""
    for value in values:
        text = _text(value)
        limit = min(len(text), len(previous))
        k = 0
        while k < limit and text[k] == previous[k]:
            k += 1
        out.append([k, text[k:]] if k > 6 else text)
        previous = text
    return out


def decode_rows(data: dict) -> list:
    """The display texts of every row (the inverse of encode_table, numbers as stored); used by the tests."""
    kinds = data["kinds"]
    texts, groups = data["texts"], data["groups"]
    out, previous = [], {}
    for row in data["rows"]:
        group = groups[row[0]]
        decoded, g, position = [], 0, 1
        for column, kind in enumerate(kinds):
            if kind == "g":
                decoded.append(texts[group[g]])
                g += 1
                continue
            value = row[position]
            position += 1
            if kind == "t":
                value = texts[value]
            elif kind == "p":
                if type(value) is list:
                    value = previous.get(column, "")[:value[0]] + value[1]
                previous[column] = value
            elif kind == "s" and value == 0:
                value = decoded[data["base"][column]]
            elif kind == "n" and data["pct"][column] and type(value) in (int, float):
                value = f"{value}%"
            decoded.append(value)
        out.append(decoded)
    return out


def entry_of(name: str, construct: dict, previous: str | None = None) -> str | None:
    """The construct.json entry a row name belongs to (the longest dotted prefix that is an entry)."""
    if previous is not None and name.startswith(previous) and name[len(previous):len(previous) + 1] == ".":
        return previous
    parts = name.split(".")
    for end in range(len(parts) - 1, 1, -1):
        prefix = ".".join(parts[:end])
        if prefix in construct:
            return prefix
    return None


OUTSIDE = "(not in construct.json)"


def module_tree(names: list, results: list, construct: dict | None) -> dict | None:
    """Nodes of construct.json with the rows under each: subtree counts of rows, errors and warnings, the worst
    result (-1 none, 0 pass, 1 warning, 2 error) and the first row (0-based, -1 none). Parents come first."""
    if not construct:
        return None
    order: dict = {}
    for entry, parent in construct.items():
        for node in (parent, entry):
            if isinstance(node, str) and node not in order:
                order[node] = len(order)
    node_names = list(order)
    parent = [-1] * len(node_names)
    for entry, up in construct.items():
        if isinstance(up, str) and up != entry:
            parent[order[entry]] = order[up]
    count = len(node_names)
    rows, errors, warnings, worst, first = [0] * count, [0] * count, [0] * count, [-1] * count, [-1] * count
    previous = None
    outside = None
    for row, (name, result) in enumerate(zip(names, results)):
        entry = entry_of(name, construct, previous) if isinstance(name, str) else None
        previous = entry
        if entry is None:
            if outside is None:
                outside = len(node_names)
                node_names.append(OUTSIDE)
                for column in (rows, errors, warnings):
                    column.append(0)
                parent.append(-1)
                worst.append(-1)
                first.append(-1)
            node = outside
        else:
            node = order[entry]
        rank = _RESULT_RANK.get(result, -1)
        seen = set()
        while node >= 0 and node not in seen:      # up the chain; a cycle in construct.json stops the walk
            seen.add(node)
            rows[node] += 1
            errors[node] += rank == 2
            warnings[node] += rank == 1
            worst[node] = max(worst[node], rank)
            if first[node] < 0:
                first[node] = row
            node = parent[node]
    return {"names": node_names, "parent": parent, "rows": rows, "errors": errors, "warnings": warnings,
            "worst": worst, "first": first}


def summary_of(summary, mode: str | None, source: str) -> dict:
    """The page summary of a CompareSummary."""
    return {"rows": summary.rows, "matched": summary.matched,
            "results": {k: summary.results.get(k, 0) for k in ("pass", "warning", "error")},
            "first_error": summary.first_error, "first_error_row": summary.first_error_row,
            "advice": summary.advice.text if summary.advice is not None else None,
            "mode": mode or summary.mode, "source": source}


def summary_from_table(columns: list, cells: dict, source: str, advise) -> dict:
    """The page summary recomputed from a read-back table's Result column and the advisor rules (`advise`:
    compare/advisor.advise, given by the caller: the report sits below the compare engine)."""
    n = len(cells[columns[0]]) if columns else 0
    results = [_text(v) for v in cells.get(col.RESULT, [""] * n)]
    counts = Counter(results)
    names = [_text(v) for v in cells.get(col.NPU_NAME, [""] * n)]
    bench = cells.get(col.BENCH_NAME)
    matched = n if bench is None else sum(1 for v in bench if v not in (NA, None, ""))
    messages = [_text(v) for v in cells.get(col.ERR_MESSAGE, [""] * n)]
    origins = cells.get(col.ERROR_ORIGIN)
    advice = advise(names, [item_state(x) for x in names], results, messages, matched,
                    None if origins is None else [_text(v) for v in origins])
    return {"rows": n, "matched": matched, "results": {k: counts.get(k, 0) for k in ("pass", "warning", "error")},
            "first_error": advice.node if advice.row is not None else None, "first_error_row": advice.row,
            "advice": advice.text, "mode": col.table_mode(columns), "source": source}


def page_data(columns: list, cells: dict, summary: dict, construct: dict | None = None,
              numeric_columns=None) -> dict:
    data = encode_table(columns, cells, numeric_columns)
    n = len(cells[columns[0]]) if columns else 0
    results = cells.get(col.RESULT, [""] * n)
    data["summary"] = summary
    data["metrics"] = [m for m in METRICS.get(summary.get("mode") or "", []) if m in columns]
    data["tree"] = module_tree(cells.get(col.NPU_NAME, [""] * n), results, construct)
    return data


def embed_json(data: dict) -> str:
    """The JSON text for a <script type="application/json"> block: no "<" at all, so no "</script>" either."""
    try:
        text = orjson.dumps(data)
    except TypeError:          # a lone surrogate (a \\ud800 escape in a dump): shown as the text \\ud800
        text = orjson.dumps(_escaped_surrogates(data))
    return text.decode("utf-8").replace("<", "\\u003c")


def _escaped_surrogates(value):
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped_surrogates(k): _escaped_surrogates(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped_surrogates(v) for v in value]
    return value


def _asset(name: str) -> str:
    with open(os.path.join(_DATA_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def stylesheet() -> str:
    """The report's CSS, for other pages in its style (msprobe triage's)."""
    return _asset("report.css")


def render_page(data: dict, title: str, script: str = "report.js") -> str:
    """The page: `data` embedded as JSON, the script (an asset of msprobe/data/report) and the report's style."""
    script, style = _asset(script), _asset("report.css")
    for text in (script, style):
        if "</" in text:
            raise ValueError("report assets must not contain '</'")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            f'script-src \'unsafe-inline\'; style-src \'unsafe-inline\'; img-src data:">\n'
            f"<title>{html.escape(title)}</title>\n<style>\n{style}\n</style>\n</head>\n<body>\n"
            f'<script type="application/json" id="msprobe-data">{embed_json(data)}</script>\n'
            f"<script>\n{script}\n</script>\n</body>\n</html>\n")


def write_page(path: str, data: dict, title: str, script: str = "report.js") -> str:
    write_text(path, render_page(data, title, script))
    get_logger().info("The HTML report is: %s.", path)
    return path


def html_path_for(table_path: str) -> str:
    return os.path.splitext(table_path)[0] + ".html"


def read_construct_beside(dump_path: str) -> dict | None:
    """construct.json beside a dump file, or None when absent or unreadable (the report works without it)."""
    path = os.path.join(os.path.dirname(os.path.abspath(dump_path)), "construct.json")
    if not os.path.isfile(path):
        return None

    try:
        return read_construct(path)
    except (MsprobeError, OSError) as exc:
        get_logger().warning("construct.json not used in the HTML report: %s", exc)
        return None


def write_compare_html(table, summary, table_path: str, target_path: str, construct: dict | None = None) -> str:
    """The page of a judged ResultTable, written beside its table file (same stem, .html)."""
    if construct is None:
        construct = read_construct_beside(target_path)
    mode = col.table_mode(table.columns) or summary.mode
    data = page_data(table.columns, table.cells, summary_of(summary, mode, os.path.basename(table_path)),
                     construct, table.numeric_columns)
    path = html_path_for(table_path)
    summary_label = summary.label.strip("[] ")
    return write_page(path, data, f"msprobe compare {summary_label} {os.path.basename(table_path)}".replace("  ", " "))


def diff_analyze_lines(path: str) -> list:
    """The answer of a first-divergence analysis (diff_analyze_<ts>.json of `compare -da`), one line per node."""
    content = load_json(path, "diff_analyze file")
    if not isinstance(content, dict):
        raise MsprobeError(f"{path} is not a diff_analyze result (expected an object keyed by rank).")
    lines = []
    for rank, nodes in content.items():
        if rank == "dtype_aware" and isinstance(nodes, dict):
            name = nodes.get("op_name")
            lines.append(f"dtype-aware: {name} on rank {nodes.get('rank')} (first introduced error)" if name else
                         "dtype-aware: none (every difference is carried from inputs or within dtype precision)")
            continue
        if rank == "culprit" and isinstance(nodes, dict):
            name = nodes.get("op_name")
            lines.append(f"culprit: {name} on rank {nodes.get('rank')} ({nodes.get('item')}: {nodes.get('result')})"
                         if name else "culprit: none (no row is an error or a warning made at its own op)")
            continue
        for node in nodes if isinstance(nodes, list) else []:
            if not isinstance(node, dict) or "op_name" not in node:
                continue
            role = node.get("role", "first divergence")
            relative = node.get("max_output_relative_error")
            detail = (f", max output relative error {relative:.3g}" if isinstance(relative, (int, float)) and relative
                      else "")
            lines.append(f"{rank}: {node['op_name']} ({role}{detail})")
    return lines


def write_table_html(table_path: str, advise, output_dir: str | None = None, construct_path: str | None = None,
                     diff_analyze_path: str | None = None) -> str:
    """The page of an existing compare result (.csv or .xlsx); summary numbers recomputed from Result."""
    header, rows = read_table(table_path)
    if not header or col.NPU_NAME not in header:
        raise MsprobeError(f"{table_path} is not a compare result table (no '{col.NPU_NAME}' column).")
    width = len(header)
    rows = [row for row in rows if row and any(v not in (None, "") for v in row)]
    cells = {name: [row[i] if i < len(row) else None for row in rows] for i, name in enumerate(header)}
    construct = None
    if construct_path:
        from msprobe.dump.reader import read_construct

        construct = read_construct(construct_path)
    source = os.path.basename(table_path)
    summary = summary_from_table(header, cells, source, advise)
    if diff_analyze_path:
        summary["diff_analyze"] = diff_analyze_lines(diff_analyze_path)
    data = page_data(header[:width], cells, summary, construct)
    stem = os.path.splitext(source)[0]
    directory = output_dir if output_dir is not None else os.path.dirname(os.path.abspath(table_path))
    os.makedirs(directory, exist_ok=True)
    return write_page(os.path.join(directory, stem + ".html"), data, f"msprobe report {source}")


def write_index(summaries: list, output_dir: str, stamp: str) -> str | None:
    """index_{stamp}.html in output_dir: one line per compared pair with its counts, first divergence and a link
    to its page. Summaries without a written table are left out."""
    entries = []
    for summary in summaries:
        if not summary.output:
            continue
        page = html_path_for(summary.output)
        link = os.path.relpath(page, output_dir).replace(os.sep, "/")
        label = summary.label.strip("[] ") or os.path.basename(summary.output)
        entries.append({"label": label, "link": link, "rows": summary.rows, "matched": summary.matched,
                        "pass": summary.results.get("pass", 0), "warning": summary.results.get("warning", 0),
                        "error": summary.results.get("error", 0), "first_error": summary.first_error,
                        "first_error_row": summary.first_error_row})
    if not entries:
        return None
    path = os.path.join(output_dir, f"index_{stamp}.html")
    write_text(path, render_index(entries, stamp))
    get_logger().info("The HTML index of all compared pairs is: %s.", path)
    return path


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def render_index(entries: list, stamp: str) -> str:
    def esc(value) -> str:
        return html.escape("" if value is None else str(value))

    lines = []
    for e in entries:
        state = "error" if e["error"] else "warning" if e["warning"] else "pass"
        first = (f'{esc(e["first_error"])} <span class="muted">(row {esc(e["first_error_row"])})</span>'
                 if e["first_error"] else '<span class="muted">none</span>')
        lines.append(f'<tr class="{state}"><td><a href="{html.escape(e["link"], quote=True)}">{esc(e["label"])}</a>'
                     f'</td><td class="num">{e["rows"]}</td><td class="num">{e["matched"]}</td>'
                     f'<td class="num">{e["pass"]}</td><td class="num">{e["warning"]}</td>'
                     f'<td class="num err">{e["error"]}</td><td>{first}</td></tr>')
    total_errors = sum(e["error"] for e in entries)
    diverged = [e for e in entries if e["first_error"]]
    if len(entries) == 1:
        headline = (f"The compared pair has errors ({_count(total_errors, 'error row')})." if diverged
                    else "The compared pair passes or warns only.")
    elif diverged:
        headline = (f"{len(diverged)} of {len(entries)} compared pairs {'has' if len(diverged) == 1 else 'have'} "
                    f"errors ({_count(total_errors, 'error row')}).")
    else:
        headline = f"All {len(entries)} compared pairs pass or warn only."
    style = ("body{font:14px system-ui,sans-serif;margin:24px;color:#1d2430}table{border-collapse:collapse}"
             "th,td{padding:4px 10px;border-bottom:1px solid #dde2ea;text-align:left}th{background:#f1f4f8}"
             "td.num{text-align:right;font-variant-numeric:tabular-nums}tr.error td.err{color:#b3261e;"
             "font-weight:600}tr.error td:first-child{border-left:4px solid #d93025}tr.warning td:first-child"
             "{border-left:4px solid #e8a400}tr.pass td:first-child{border-left:4px solid #34a853}"
             ".muted{color:#6b7380}")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>msprobe compare index {esc(stamp)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
            f"<h1>msprobe compare: {_count(len(entries), 'result')}</h1>\n<p>{esc(headline)}</p>\n"
            "<table id=\"ranks\">\n<thead><tr><th>Pair</th><th>Rows</th><th>Matched</th><th>Pass</th>"
            "<th>Warning</th><th>Error</th><th>First divergence</th></tr></thead>\n<tbody>\n"
            + "\n".join(lines) + "\n</tbody>\n</table>\n</body>\n</html>\n")
