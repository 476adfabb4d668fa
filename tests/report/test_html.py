"""The HTML report: data embedding (round trip, escaping, dedup), the index page, the CLI, and a headless browser."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from msprobe.compare.pipeline import CompareSummary
from msprobe.report.html import (
    DIGITS,
    decode_rows,
    embed_json,
    encode_table,
    module_tree,
    page_data,
    render_page,
    write_index,
)

from conftest import FIXTURES, fixture_pair, only_file, read_csv, run_cli

ARTIFACTS = Path(os.environ.get("MSPROBE_ARTIFACTS") or Path(__file__).resolve().parents[1] / "artifacts")
DATA_BLOCK = re.compile(r'<script type="application/json" id="msprobe-data">(.*?)</script>', re.S)


def embedded(html_text: str) -> dict:
    (block,) = DATA_BLOCK.findall(html_text)
    return json.loads(block)


def table_cells():
    stack = "['File /srv/model.py, line 3, in forward, \\n return x </script><!-- <script>', 'File <module>']"
    columns = ["NPU Name", "Bench Name", "NPU Dtype", "Max diff", "MaxRelativeErr", "NPU max", "Result",
               "NPU_Stack_Info"]
    cells = {
        "NPU Name": ["Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0",
                     "Functional.linear.0.backward.input.0", "Tensor.add.1.forward.input.0"],
        "Bench Name": ["Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0", "N/A",
                       "Tensor.add.1.forward.input.0"],
        "NPU Dtype": ["torch.float32", "torch.float32", "torch.bfloat16", "torch.float32"],
        "Max diff": ["0", "-3.227403502729779e-08", "N/A", "inf"],
        "MaxRelativeErr": ["0.0%", "12.5%", "N/A", "0.013855987554467056%"],
        "NPU max": [1.0, 0.41907414913721486, None, 7],
        "Result": ["pass", "error", "warning", "pass"],
        "NPU_Stack_Info": [stack, "N/A", stack, stack],
    }
    return columns, cells, stack


def test_embedding_round_trip_rounds_numbers_and_keeps_texts():
    columns, cells, stack = table_cells()
    data = json.loads(embed_json(encode_table(columns, cells, frozenset({"NPU max"}))))
    assert data["columns"] == columns
    assert data["kinds"][columns.index("NPU Name")] == "p"      # prefix-coded against the row before
    assert data["kinds"][columns.index("Bench Name")] == "s"    # 0 = same as NPU Name
    assert data["kinds"][columns.index("Max diff")] == "n"
    assert data["pct"][columns.index("MaxRelativeErr")] is True
    rows = decode_rows(data)
    assert [r[0] for r in rows] == cells["NPU Name"]
    assert [r[1] for r in rows] == cells["Bench Name"]
    assert [r[2] for r in rows] == cells["NPU Dtype"]
    assert [r[3] for r in rows] == [0, float(f"%.{DIGITS}g" % -3.227403502729779e-08), "N/A", "inf"]
    assert [r[4] for r in rows] == ["0.0%", "12.5%", "N/A", "0.01385599%"]
    assert [r[5] for r in rows] == [1.0, 0.4190741, None, 7]
    assert [r[6] for r in rows] == cells["Result"]
    assert [r[7] for r in rows] == cells["NPU_Stack_Info"]
    assert data["rows"][1][1] == [28, "output.0"]       # "Functional.linear.0.forward." shared


def test_stacks_are_stored_once_and_referenced_by_index():
    columns, cells, stack = table_cells()
    data = encode_table(columns, cells)
    assert data["texts"].count(stack) == 1
    stack_at = 1 + [c for c, k in zip(columns, data["kinds"]) if k != "g"].index("NPU_Stack_Info")
    references = [row[stack_at] for row in data["rows"]]
    assert references[0] == references[2] == references[3] == data["texts"].index(stack)
    assert data["texts"][references[1]] == "N/A"
    page = render_page(page_data(columns, cells, {"rows": 4}), "t")
    assert page.count("File /srv/model.py, line 3") == 1


def test_script_close_in_data_is_escaped_and_parses_back():
    columns, cells, stack = table_cells()
    page = render_page(page_data(columns, cells, {"rows": 4, "advice": "a </script> b"}), "x </script>")
    (block,) = DATA_BLOCK.findall(page)
    assert "<" not in block and "</script" not in block.lower()
    assert page.count("</script>") == 2                 # the data block and the code block, nothing else
    assert "<title>x &lt;/script&gt;</title>" in page
    data = json.loads(block)
    assert data["summary"]["advice"] == "a </script> b"
    assert stack in data["texts"]
    assert 'src="http' not in page and "href=\"http" not in page and "@import" not in page


def test_module_tree_counts_and_worst_result_per_subtree():
    construct = {"Module.a.A.forward.0": None, "Functional.relu.0.forward": "Module.a.A.forward.0",
                 "Module.a.b.B.forward.0": "Module.a.A.forward.0",
                 "Functional.gelu.0.forward": "Module.a.b.B.forward.0"}
    names = ["Module.a.A.forward.0.input.0", "Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0",
             "Functional.gelu.0.forward.output.0", "Tensor.add_.0.forward.input.0"]
    results = ["pass", "warning", "pass", "error", "pass"]
    tree = module_tree(names, results, construct)
    index = {name: i for i, name in enumerate(tree["names"])}
    top, relu, inner, gelu = (index[n] for n in ("Module.a.A.forward.0", "Functional.relu.0.forward",
                                                  "Module.a.b.B.forward.0", "Functional.gelu.0.forward"))
    assert tree["parent"][top] == -1 and tree["parent"][gelu] == inner and tree["parent"][inner] == top
    assert (tree["rows"][top], tree["errors"][top], tree["warnings"][top], tree["worst"][top]) == (4, 1, 1, 2)
    assert (tree["rows"][relu], tree["errors"][relu], tree["worst"][relu], tree["first"][relu]) == (2, 0, 1, 1)
    assert (tree["rows"][inner], tree["errors"][inner], tree["first"][inner]) == (1, 1, 3)
    outside = index["(not in construct.json)"]
    assert (tree["rows"][outside], tree["worst"][outside], tree["parent"][outside]) == (1, 0, -1)
    assert module_tree(names, results, None) is None


def test_index_page_links_every_rank_with_counts(tmp_path):
    summaries = []
    for rank, errors in ((0, 0), (1, 3)):
        summary = CompareSummary(label=f"[rank{rank}] ", mode="statistics", rows=10, matched=9,
                                 results={"pass": 10 - errors, "error": errors},
                                 output=str(tmp_path / f"compare_result_rank{rank}_20250101000000.csv"))
        if errors:
            summary.first_error, summary.first_error_row = "Functional.linear.0.forward.output.0", 4
        summaries.append(summary)
    summaries.append(CompareSummary(label="[rank2] ", mode="statistics"))      # no table written: left out
    path = write_index(summaries, str(tmp_path), "20250101000000")
    assert Path(path).name == "index_20250101000000.html"
    text = Path(path).read_text()
    assert re.findall(r'href="([^"]+)"', text) == ["compare_result_rank0_20250101000000.html",
                                                   "compare_result_rank1_20250101000000.html"]
    assert '<tr class="error"><td><a href="compare_result_rank1_20250101000000.html">rank1</a>' in text
    assert '<td class="num err">3</td><td>Functional.linear.0.forward.output.0 <span class="muted">(row 4)' in text
    assert "1 of 2 compared pairs has errors (3 error rows)." in text
    assert write_index([CompareSummary(label="", mode="md5")], str(tmp_path), "x") is None


def csv_summary(rows: list) -> dict:
    """Counts and the culprit of a result table, read from its verdict cells by the compare core's rule."""
    from msprobe.compare.verdict import culprit_row
    from msprobe.dump.naming import item_state

    header, body = rows[0], rows[1:]
    results = [r[header.index("Result")] for r in body]
    origins = [r[header.index("Error_Origin")] for r in body] if "Error_Origin" in header else None
    first = culprit_row([item_state(r[0]) for r in body], results, [r[header.index("Err_message")] for r in body],
                        origins)
    return {"rows": len(body), "counts": Counter(results), "first_row": None if first is None else first + 1,
            "first_name": None if first is None else body[first][0], "header": header, "body": body}


def compare_with_html(tmp_path) -> tuple[Path, Path]:
    target, golden = fixture_pair("stats_mix_step0")
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv", "--html"]) == 0
    table = only_file(out, "compare_result_*.csv")
    page = only_file(out, "compare_result_*.html")
    assert page.stem == table.stem
    return table, page


def test_compare_html_beside_the_table_matches_the_csv(tmp_path):
    table, page = compare_with_html(tmp_path)
    expected = csv_summary(read_csv(table))
    data = embedded(page.read_text(encoding="utf-8"))
    summary = data["summary"]
    assert summary["rows"] == expected["rows"] == 1350
    assert summary["results"] == {k: expected["counts"][k] for k in ("pass", "warning", "error")}
    assert (summary["first_error_row"], summary["first_error"]) == (expected["first_row"], expected["first_name"])
    # the culprit, as the advisor names it: where the precision drops (the bfloat16 linear's output)
    assert (summary["first_error_row"], summary["first_error"]) == (89, "Functional.linear.2.forward.output.0")
    assert summary["mode"] == "statistics" and summary["source"] == table.name
    assert data["metrics"][0] == "NormRelativeErr"
    rows = decode_rows(data)
    header = expected["header"]
    for column in ("NPU Name", "Bench Name", "Result", "Err_message", "NPU_Stack_Info", "NPU Tensor Shape"):
        i = header.index(column)
        assert [str(r[i]) for r in rows] == [b[i] for b in expected["body"]], column
    tree = data["tree"]
    assert tree is not None and sum(tree["rows"][n] for n, up in enumerate(tree["parent"]) if up < 0) == 1350
    assert sum(tree["errors"][n] for n, up in enumerate(tree["parent"]) if up < 0) == expected["counts"]["error"]
    assert len(data["texts"]) < 200          # every stack stored once


def test_report_command_rebuilds_the_page_from_a_csv(tmp_path):
    table, page = compare_with_html(tmp_path)
    construct = FIXTURES / "stats_mix_step0" / "target" / "construct.json"
    assert run_cli(["report", table, "-o", tmp_path / "pages", "--construct", construct]) == 0
    rebuilt = embedded(only_file(tmp_path / "pages", "*.html").read_text(encoding="utf-8"))
    original = embedded(page.read_text(encoding="utf-8"))
    for key in ("rows", "matched", "results", "first_error", "first_error_row", "advice", "mode"):
        assert rebuilt["summary"][key] == original["summary"][key], key
    assert rebuilt["tree"]["errors"] == original["tree"]["errors"]
    assert [r[0] for r in decode_rows(rebuilt)] == [r[0] for r in decode_rows(original)]
    assert run_cli(["report", table]) == 0                  # default: beside the table, no tree
    assert embedded(page.read_text(encoding="utf-8"))["tree"] is None
    assert run_cli(["report", tmp_path / "missing.csv"]) == 1
    assert run_cli(["report", construct]) == 2


def test_directory_compare_writes_one_page_per_rank_and_an_index(multirank_step0, tmp_path):
    target, golden = multirank_step0
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv", "--html", "-j", "2"]) == 0
    tables = sorted(out.rglob("compare_result_*.csv"))
    pages = sorted(out.rglob("compare_result_*.html"))
    assert len(tables) == 4 and [p.with_suffix(".csv") for p in pages] == tables
    index = only_file(out, "index_*.html")
    links = re.findall(r'href="([^"]+)"', index.read_text())
    assert sorted((out / link).resolve() for link in links) == [p.resolve() for p in pages]
    for page in pages:
        summary = embedded(page.read_text(encoding="utf-8"))["summary"]
        errors = summary["results"]["error"]
        assert f'<td class="num err">{errors}</td>' in index.read_text()


# ------------------------------------------------------------------------------------------ browser
def open_browser():
    from html_browser import Browser, BrowserError, find_chromium

    if find_chromium() is None:
        pytest.skip("no chromium executable (apt-get install chromium chromium-driver)")
    try:
        return Browser(width=1400, height=1000).__enter__()
    except (BrowserError, OSError) as exc:
        pytest.skip(f"chromium cannot be started here: {exc}")


def test_report_in_headless_chromium(tmp_path):
    table, page = compare_with_html(tmp_path)
    expected = csv_summary(read_csv(table))
    header, body = expected["header"], expected["body"]
    browser = open_browser()
    try:
        browser.open(str(page))
        browser.wait_for("document.documentElement.getAttribute('data-ready') === '1'", timeout=15)

        def text(element_id):
            return browser.evaluate(f"document.getElementById({element_id!r}).textContent")

        counts = expected["counts"]
        assert text("sum-rows") == str(expected["rows"])
        assert text("sum-matched") == str(sum(1 for r in body if r[1] != "N/A"))
        assert (text("sum-pass"), text("sum-warning"), text("sum-error")) == (
            str(counts["pass"]), str(counts["warning"]), str(counts["error"]))
        assert text("sum-first") == f"{expected['first_name']}  (row {expected['first_row']})"
        assert text("view-count") == f"{expected['rows']} of {expected['rows']} rows"
        origin = header.index("Error_Origin")
        introduced = [i for i, r in enumerate(body) if r[origin] == "introduced"]
        assert browser.evaluate("window.msprobeReport.introducedRows()") == introduced
        assert text("sum-introduced") == (f"{body[introduced[0]][0]}  (row {introduced[0] + 1})" if introduced
                                          else "none")

        # filter to error rows
        browser.evaluate("(function(){var s=document.getElementById('filter-result'); s.value='error';"
                         "s.dispatchEvent(new Event('change'));})()")
        error_rows = [i for i, r in enumerate(body) if r[header.index("Result")] == "error"]
        assert text("view-count") == f"{len(error_rows)} of {expected['rows']} rows"
        assert browser.evaluate("window.msprobeReport.view()") == error_rows
        visible = browser.evaluate("window.msprobeReport.visibleRows()")
        assert visible == error_rows[:len(visible)] and visible
        shown = browser.evaluate("Array.from(document.querySelectorAll('#table-body .row'))"
                                 ".filter(function(r){return r.style.display !== 'none';})"
                                 ".map(function(r){return r.childNodes[0].textContent;})")
        assert shown == [body[i][0] for i in visible]

        # click the first point of the chart: its row is selected and its stack shown
        first = browser.evaluate("window.msprobeReport.firstPoint()")
        assert first == 0
        point = browser.evaluate(f"window.msprobeReport.pointAt({first})")
        browser.click(point["x"], point["y"])
        assert browser.wait_for(f"window.msprobeReport.selected() === {first}", timeout=5)
        assert text("view-count") == f"{expected['rows']} of {expected['rows']} rows"    # filter cleared
        stack = text("stack")
        stack_cell = body[first][header.index("NPU_Stack_Info")]
        assert stack_cell.startswith("['File ") and stack.startswith(stack_cell[2:40])
        assert stack.count("\n") >= stack_cell.count("', '")
        assert browser.evaluate("document.querySelector('#table-body .row.sel').childNodes[0].textContent") \
            == body[first][0]
        ARTIFACTS.mkdir(exist_ok=True)
        shot = browser.screenshot(str(ARTIFACTS / "report_stats_mix.png"))
        assert Path(shot).stat().st_size > 10000
    finally:
        browser.close()


def test_report_shows_the_diff_analyze_answer(multirank_step0, tmp_path):
    import json as _json

    from msprobe.report.html import diff_analyze_lines

    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "da", "-da"]) == 0
    analysis = only_file(tmp_path / "da", "diff_analyze_*.json")
    lines = diff_analyze_lines(str(analysis))
    assert lines[0].startswith("rank_1: Functional.linear.2.forward (origin")
    assert any(line.startswith("rank_0: Distributed.all_reduce.0.forward (received through communication") for line in lines)
    assert lines[-2].startswith("dtype-aware: none")
    assert lines[-1] == "culprit: Functional.linear.2.forward on rank 1 (Functional.linear.2.forward.output.0: error)"
    assert run_cli(["compare", "-tp", target / "rank1", "-gp", golden / "rank1", "-o", tmp_path / "t", "--csv",
                    "-c"]) == 0
    table = only_file(tmp_path / "t", "compare_result_*.csv")
    assert run_cli(["report", table, "-o", tmp_path / "r", "--diff_analyze", analysis]) == 0
    page = only_file(tmp_path / "r", "*.html").read_text()
    data = _json.loads(page.split('id="msprobe-data">', 1)[1].split("</script>", 1)[0])
    assert data["summary"]["diff_analyze"] == lines


def test_page_carries_error_origin_and_the_chart_marks_introduced_rows(tmp_path):
    """The page data holds the Error_Origin column (the script marks its introduced rows on the chart and names
    the first one in the summary)."""
    from msprobe.report.html import page_data

    columns = ["NPU Name", "Result", "Err_message", "Error_Origin"]
    cells = {"NPU Name": ["a.forward.output.0", "b.forward.output.0", "c.forward.output.0"],
             "Result": ["pass", "pass", "error"], "Err_message": ["", "", ""],
             "Error_Origin": ["dtype", "introduced", "inherited"]}
    data = page_data(columns, cells, {"mode": "statistics"})
    assert [row[3] for row in decode_rows(data)] == cells["Error_Origin"]
    script = (Path(__file__).parents[2] / "msprobe" / "data" / "report" / "report.js").read_text()
    assert "colIndex('Error_Origin')" in script and "'introduced'" in script and "first introduced" in script


@pytest.mark.slow
def test_noise_rows_are_marked_on_the_page(tmp_path):
    """A CNN whose conv biases feed BatchNorm (tests/culprits.py): their gradients lie at the rounding floor of their
    inputs. The table notes them, the page's chart marks them, and the summary names the culprit (issue 27)."""
    pytest.importorskip("torch")
    import culprits

    target, golden = culprits.dump_pair("cnn", tmp_path / "dumps", "tensor")
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target / "dump.json", "-gp", golden / "dump.json", "-o", out, "--csv",
                    "--html"]) == 0
    rows = read_csv(only_file(out, "compare_result_*.csv"))
    header, body = rows[0], rows[1:]
    message = header.index("Err_message")
    noise = [i for i, r in enumerate(body) if "note: below the noise floor" in r[message]]
    names = [body[i][0] for i in noise]
    assert "Functional.conv2d.0.backward.output.2" in names and "Module.conv1.Conv2d.parameters_grad.0.bias" in names
    assert all(body[i][header.index("Error_Origin")] == "" for i in noise)
    page = only_file(out, "compare_result_*.html")
    summary = embedded(page.read_text(encoding="utf-8"))["summary"]
    assert summary["first_error"] == "Functional.conv2d.1.forward.output.0"
    browser = open_browser()
    try:
        browser.open(str(page))
        browser.wait_for("document.documentElement.getAttribute('data-ready') === '1'", timeout=15)
        assert browser.evaluate("window.msprobeReport.noiseRows()") == noise
        legend = browser.evaluate("document.querySelector('.legend').textContent")
        assert "below the noise floor" in legend
    finally:
        browser.close()


# What a person sees on the page, measured in the browser: the labels of the marked rows lie above the plot and cover
# no point; the y axis names its metric and unit and its ticks differ; "(row N)" in a summary card is never broken.
SEEN = """(function () {
  var R = window.msprobeReport, L = R.chartLayout(), box = document.getElementById('chart').getBoundingClientRect();
  var covered = [];
  for (var r = 0; r < R.rows; r++) {
    var p = R.pointAt(r), x = p.x - box.left, y = p.y - box.top;
    if (!isFinite(y)) continue;
    L.labels.forEach(function (l) {
      if (x >= l.x - 3 && x <= l.x + l.w + 3 && y >= l.y - 3 && y <= l.y + l.h + 3) covered.push([l.text, r]);
    });
  }
  var refs = Array.from(document.querySelectorAll('.card.wide .rowref'));
  return { layout: L, covered: covered, rowrefs: refs.map(function (e) { return [e.textContent, e.getClientRects().length]; }),
           title: document.querySelector('h1').textContent };
})()"""


def _look_at(browser, page, shot: str, widths=(1400, 900)) -> dict:
    """Open a report page at each window width, check what a person would see, keep a screenshot of each."""
    seen = None
    for width in widths:
        browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 1000, "deviceScaleFactor": 1,
                                                           "mobile": False})
        browser.open(str(page))
        browser.wait_for("document.documentElement.getAttribute('data-ready') === '1'", timeout=15)
        seen = browser.evaluate(SEEN)
        layout = seen["layout"]
        assert seen["covered"] == [], f"labels over points at width {width}"
        assert all(label["y"] + label["h"] <= layout["plotTop"] for label in layout["labels"])
        assert len(set(layout["ticks"])) == 5, layout["ticks"]          # five ticks, no two alike
        assert seen["rowrefs"] and all(re.fullmatch(r"\(row \d+\)", text) and lines == 1
                                       for text, lines in seen["rowrefs"]), seen["rowrefs"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert Path(browser.screenshot(str(ARTIFACTS / f"{shot}_{width}.png"))).stat().st_size > 10000
    return seen


def test_report_pages_read_as_a_person_reads_them(tmp_path):
    """The cross-framework page (two marked rows, percent metric on a log scale, long names in the summary cards)
    and the index of a single pair. The MindSpore run is made wrong at its first GELU (the twins agree otherwise:
    no culprit, nothing marked), so the page marks the culprit and the first introduced row."""
    out = tmp_path / "cross"
    ms = json.loads((FIXTURES / "cross" / "ms_mix" / "dump.json").read_text())
    ms["data"]["Functional.gelu.0.forward"]["output"][0]["Max"] *= 1.5
    (tmp_path / "ms_mix").mkdir()
    (tmp_path / "ms_mix" / "dump.json").write_text(json.dumps(ms))
    assert run_cli(["compare", "-tp", tmp_path / "ms_mix" / "dump.json", "-gp",
                    FIXTURES / "cross" / "pt_mix" / "dump.json", "-o", out, "--csv", "--html", "-c"]) == 0
    target, golden = fixture_pair("stats_mix_step0")
    for side, dump in (("t", target), ("g", golden)):
        (tmp_path / side / "step0" / "rank0").mkdir(parents=True)
        for name in ("dump.json", "stack.json", "construct.json"):
            (tmp_path / side / "step0" / "rank0" / name).write_bytes((Path(dump).parent / name).read_bytes())
    assert run_cli(["compare", "-tp", tmp_path / "t" / "step0", "-gp", tmp_path / "g" / "step0", "-o",
                    tmp_path / "one", "--csv", "--html", "-c"]) == 0
    browser = open_browser()
    try:
        seen = _look_at(browser, only_file(out, "compare_result_*.html"), "report_cross_mix")
        layout = seen["layout"]
        assert [label["text"].split(":")[0] for label in layout["labels"]] == ["culprit", "first introduced"]
        assert layout["yTitle"].startswith("NormRelativeErr (%)")
        assert all(tick.endswith("%") for tick in layout["ticks"])
        browser.open(str(only_file(tmp_path / "one", "index_*.html")))
        assert browser.evaluate("document.querySelector('h1').textContent") == "msprobe compare: 1 result"
        assert browser.evaluate("document.querySelector('p').textContent") == \
            "The compared pair has errors (6 error rows)."
        browser.screenshot(str(ARTIFACTS / "report_index_one.png"))
    finally:
        browser.close()


def test_the_cosine_chart_keeps_its_label_off_the_points(tensor_mix, tmp_path):
    """Tensor mode: cosines near 1 lie at the top of the plot, where the culprit's label used to be."""
    target, golden = tensor_mix
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--csv", "--html", "-c"]) == 0
    browser = open_browser()
    try:
        seen = _look_at(browser, only_file(tmp_path, "compare_result_*.html"), "report_tensor_cosine")
        assert seen["layout"]["yTitle"] == "Cosine" and seen["layout"]["labels"][0]["text"].startswith("culprit")
    finally:
        browser.close()
