"""End to end: our compare .vis shown by TensorBoard's tb-graph-ascend plugin in headless Chromium.

TensorBoard runs in a subprocess on a free local port with the .vis of the stats_mix fixture in a run folder; the
graph_ascend tab is opened in Chromium (msprobe.report.html_browser's DevTools client) and the test waits until
the plugin's web components (inside shadow roots and the plugin's iframe) have drawn the two graphs. It checks
the node names on screen, the fill colour of every drawn NPU node against the colour our file's precision index
and `Colors` give it, expands the worst top-level module by a real double click, and saves a screenshot to
$MSPROBE_ARTIFACTS (CI artefacts) or the test's tmp_path. Skipped when chromium, tensorboard or tb-graph-ascend
is missing (`pip install "msprobe-toolkit[tensorboard]"`; `apt-get install chromium`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from html_browser import Browser, BrowserError, find_chromium

from conftest import FIXTURES, only_file, run_cli

STATS = FIXTURES / "stats_mix_step0"
WIDTH, HEIGHT = 1400, 1000
# the brief's flag set; html_browser adds the rest (headless, no sandbox, no gpu, fresh profile, ...)
CHROMIUM_ARGS = ("--disable-quic",)
BUDGET = 60.0  # seconds for the whole test, start-up of both processes included (typically 6-7 s)
# Run folder name: not "run" -- the plugin's default config_data holds a key "run" (a string), so a run of that
# name makes loadGraphConfigInfo fail in TensorBoard ("load graph config failed").
RUN = "stats_mix"

# JS: every element matching a selector, through open shadow roots and same-origin iframes (the plugin page is an
# iframe of TensorBoard's page, its components are Polymer elements with shadow roots).
DEEP = """(sel => { const found = [];
  (function walk(root) { for (const el of root.querySelectorAll('*')) {
      if (el.matches(sel)) found.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.tagName === 'IFRAME') { try { if (el.contentDocument) walk(el.contentDocument); } catch (e) {} } } })(document);
  return found; })"""
# JS: the drawn nodes: name -> fill, shown label, whether its box lies inside the graph's visible area, centre on the
# page (iframe offset added) for real mouse events.
NODES = f"""(() => {{ const out = {{}};
  for (const rect of {DEEP}('rect.inner-rect[name]')) {{
    const name = rect.getAttribute('name'), svg = rect.closest('svg');
    const text = rect.parentNode.querySelector('text[name="' + CSS.escape(name) + '"]');
    const r = rect.getBoundingClientRect(), s = svg.getBoundingClientRect();
    const frame = rect.ownerDocument.defaultView.frameElement, f = frame ? frame.getBoundingClientRect() : {{left: 0, top: 0}};
    const label = text ? Array.from(text.childNodes).filter(n => n.nodeType === 3).map(n => n.data).join('') : '';
    out[name] = {{fill: rect.getAttribute('fill'), label: label,
      visible: r.width > 0 && r.right > s.left && r.left < s.right && r.bottom > s.top && r.top < s.bottom,
      x: f.left + r.left + r.width / 2, y: f.top + r.top + r.height / 2}};
  }}
  return out; }})()"""
ERRORS = f"{DEEP}('vaadin-notification-card').map(e => e.textContent.trim()).filter(t => t)"


def _missing() -> str | None:
    if find_chromium() is None:
        return "no chromium executable (apt-get install chromium)"
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return 'tensorboard is not installed (pip install "msprobe-toolkit[tensorboard]")'
    if not any(ep.name == "graph_ascend" for ep in entry_points(group="tensorboard_plugins")):
        return "the tb-graph-ascend TensorBoard plugin is not installed (pip install \"msprobe-toolkit[tensorboard]\")"
    return None


MISSING = _missing()
pytestmark = [pytest.mark.skipif(MISSING is not None, reason=str(MISSING)), pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """End the TensorBoard we started: its own process group (start_new_session), TERM then KILL."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        except ProcessLookupError:
            pass


@pytest.fixture
def tensorboard(tmp_path):
    """TensorBoard serving a log directory with our compare .vis in the run folder RUN; yields (url, .vis path,
    the test's deadline on the monotonic clock)."""
    deadline = time.monotonic() + BUDGET
    ready_by = time.monotonic() + 20
    logdir = tmp_path / "logs"
    run = logdir / RUN
    assert run_cli(["graph", "-tp", STATS / "target", "-gp", STATS / "golden", "-o", run]) == 0
    os.chmod(logdir, 0o750)
    os.chmod(run, 0o750)  # the plugin refuses group- or other-writable folders
    vis = only_file(run, "compare_*.vis")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "tensorboard.log"
    with open(log, "wb") as sink:
        # --load_fast=false: no separate Rust data server process (the plugin reads its files itself)
        process = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                                    "--host", "127.0.0.1", "--port", str(port), "--load_fast=false"],
                                   stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=tmp_path)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http_proxy
    try:
        answer = None
        while answer is None:
            if process.poll() is not None or time.monotonic() > ready_by:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"tensorboard did not come up (exit code {process.poll()}): {tail}")
            try:
                with direct.open(f"{url}/data/plugin/graph_ascend/load_meta_dir", timeout=2) as response:
                    answer = json.load(response)
            except OSError:
                time.sleep(0.1)
        assert answer["data"] == {RUN: {"type": "json", "tags": [vis.name[:-len(".vis")]]}}, answer
        yield url, vis, deadline
    finally:
        _stop(process)


def _screenshot_path(tmp_path) -> Path:
    folder = os.environ.get("MSPROBE_ARTIFACTS")
    folder = Path(folder) if folder else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "tensorboard_graph_ascend.png"


def _expected_fill(node: dict, colors: dict) -> str:
    """The plugin's colouring of an NPU node (its frontend rule): unmatched grey; API collections white; otherwise
    the first `Colors` entry with low <= index < high (1 in [x, 1], 0 in [0, x]); no index: white."""
    if node["node_type"] in (8, 9):  # multi collection, API collection
        return "white"
    if not node["matched_node_link"]:
        return "rgb(199, 199, 199)"
    index = node["data"].get("precision_index")
    if index is None:
        return "rgb(255, 255, 255)"
    for colour, entry in colors.items():
        if entry["value"]:
            low, high = entry["value"]
            if low <= index < high or (high == 1 and index == 1) or (low == 0 and index == 0):
                return colour
    return "rgb(199, 199, 199)"


def _double_click(browser: Browser, x: float, y: float) -> None:
    for kind, count in (("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 1), ("mousePressed", 2),
                        ("mouseReleased", 2)):
        browser.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                  "clickCount": count})


def test_compare_graph_in_tensorboard(tensorboard, tmp_path):
    url, vis_path, deadline = tensorboard
    vis = json.loads(vis_path.read_text())
    npu, bench, colors = vis["NPU"]["node"], vis["Bench"]["node"], vis["Colors"]
    root = vis["NPU"]["root"]
    top = npu[root]["subnodes"]
    # the red module we open below: the block holding the culprit (blocks.0.mlp.fc1 runs in bfloat16: the precision
    # drops there, 0.85), the top node of the highest index
    worst = "Module.blocks.0.Block.forward.0"
    assert worst in top and npu[worst]["data"]["precision_index"] == 0.85
    assert max(top, key=lambda name: npu[name]["data"].get("precision_index") or 0) == worst

    def remaining() -> float:
        left = deadline - time.monotonic()
        assert left > 1, "the browser test ran out of its time budget"
        return left

    try:
        browser = Browser(width=WIDTH, height=HEIGHT, timeout=10, extra_args=CHROMIUM_ARGS).__enter__()
    except (BrowserError, OSError) as exc:
        pytest.skip(f"chromium cannot be started here: {exc}")
    shot = _screenshot_path(tmp_path)
    try:
        browser.navigate(f"{url}/#graph_ascend", WIDTH, HEIGHT)
        # rendered: both graphs hold the root and its children
        first = f"N___{top[0]}"
        browser.wait_for(f"(() => {{ const n = {NODES}; return n['N___{root}'] && n['B___{root}'] && n['{first}']; }})()",
                         timeout=min(30, remaining()))
        assert browser.evaluate(ERRORS) == []
        tab = browser.evaluate(f"{DEEP}('.mat-mdc-tab, .mat-tab-label, [role=tab]').map(e => e.textContent.trim())")
        assert "graph_ascend" in [t.lower() for t in tab], tab
        drawn = browser.evaluate(NODES)
        assert {n[4:] for n in drawn if n.startswith("N___")} == {root, *top}
        assert {n[4:] for n in drawn if n.startswith("B___")} == {vis["Bench"]["root"], *bench[root]["subnodes"]}
        for name in (root, "Module.tok_emb.Embedding.forward.0", "Module.blocks.0.Block.forward.0"):
            assert drawn[f"N___{name}"]["visible"] and drawn[f"N___{name}"]["label"] == name, drawn[f"N___{name}"]
            assert drawn[f"B___{name}"]["visible"] and drawn[f"B___{name}"]["label"] == name, drawn[f"B___{name}"]
        # precision colours: every drawn NPU node filled as our precision index says; the golden side stays white
        for name in top:
            assert drawn[f"N___{name}"]["fill"] == _expected_fill(npu[name], colors), (name, npu[name]["data"])
        fills = {drawn[f"N___{name}"]["fill"] for name in top}
        assert {"#FFFCF3", "#FFEDBE", "#FFDC7F", "#FF704D"} <= fills  # light, pale yellow, yellow and red on screen
        assert drawn[f"N___{worst}"]["fill"] == "#FF704D"
        assert {drawn[f"B___{name}"]["fill"] for name in bench[root]["subnodes"]} <= {"rgba(255, 255, 255, 1)",
                                                                                       "white"}

        # English labels (the plugin starts in Chinese), then open the red module
        browser.evaluate(f"{DEEP}('.language-button')[0].click()")
        browser.wait_for(f"{DEEP}('.fit-screen vaadin-button')[0].textContent.trim() === 'Fit Screen'",
                         timeout=min(5, remaining()))
        # minimaps off (they overlay the graph's top right corner in the screenshot), then fit the graph to the view
        browser.evaluate(f"{DEEP}('vaadin-checkbox').filter(c => /minimap/.test(c.textContent) && c.checked)"
                         ".forEach(c => c.click())")
        browser.evaluate(f"{DEEP}('.fit-screen vaadin-button')[0].click()")
        browser.wait_for(f"(() => {{ const n = {NODES}['N___{worst}']; return n && n.visible; }})()",
                         timeout=min(5, remaining()))
        time.sleep(0.5)  # the fit animation moves the node; take its final place
        box = browser.evaluate(f"{NODES}['N___{worst}']")
        _double_click(browser, box["x"], box["y"])
        children = npu[worst]["subnodes"]
        browser.wait_for(f"(() => {{ const n = {NODES}; return {json.dumps(['N___' + c for c in children])}"
                         ".every(c => n[c] && n[c].visible); })()", timeout=min(10, remaining()))
        time.sleep(0.4)  # let the expand transition finish before the screenshot
        drawn = browser.evaluate(NODES)
        for child in children:
            assert drawn[f"N___{child}"]["fill"] == _expected_fill(npu[child], colors), (child, npu[child]["data"])
        assert drawn["N___Module.blocks.0.ln1.LayerNorm.forward.0"]["label"] == "ln1.LayerNorm.forward.0"
        # the golden side opens in step ("corresponding side node expanded synchronously")
        assert all(f"B___{c}" in drawn for c in bench[worst]["subnodes"])
        # the double click also selects the node: its comparison details name both sides
        details = browser.wait_for(f"(() => {{ const t = {DEEP}('graph-info-board')[0].shadowRoot.textContent; "
                                   f"return t.includes('{worst}') && t; }})()", timeout=min(5, remaining()))
        assert "Debug node" in details and "Bench node" in details
        assert browser.evaluate(ERRORS) == []
    finally:
        try:
            browser.screenshot(str(shot))  # also when a check failed: the picture shows what the page showed
            print(f"screenshot: {shot}")
        except (BrowserError, OSError) as exc:
            print(f"no screenshot: {exc}")
        browser.close()
    assert shot.stat().st_size > 20000
    assert time.monotonic() < deadline
