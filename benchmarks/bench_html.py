#!/usr/bin/env python3
"""Benchmark of the HTML report: build it for the synthetic 20k-entry pair, then measure its size and how long
headless Chromium takes until the page is ready (the page sets data-ready="1" on <html> when it has parsed its
data and drawn the summary, chart, tree and the first table rows).

    python benchmarks/bench_html.py                      # makes /tmp/b20 with make_dumps.py when missing
    python benchmarks/bench_html.py --dumps /tmp/b20 --runs 5 --screenshot docs/report.png
    python benchmarks/bench_html.py --repeat 15          # the same rows 15 times (~1M rows): scrolling check

Targets (issue 10): <= 15 MB and ready in < 3 s for the 20k-entry pair (about 70k rows)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
READY = "document.documentElement.getAttribute('data-ready') === '1'"
SCROLL_PROBE = """(function(){
  var g = document.getElementById('grid'), n = 60, t0 = performance.now();
  for (var i = 1; i <= n; i++) { g.scrollTop = (g.scrollHeight - g.clientHeight) * i / n;
    g.dispatchEvent(new Event('scroll')); }
  var perScroll = (performance.now() - t0) / n;
  g.scrollTop = 0; g.dispatchEvent(new Event('scroll'));
  var s = document.getElementById('filter-result'); t0 = performance.now();
  s.value = 'error'; s.dispatchEvent(new Event('change'));
  var filter = performance.now() - t0; s.value = ''; s.dispatchEvent(new Event('change'));
  return [perScroll, filter, document.querySelectorAll('#table-body .row').length];
})()"""


def build(dumps: str, out: str, repeat: int) -> tuple[str, float, int]:
    from msprobe.compare.pipeline import CompareOptions, compare_dumps, read_sides, write_table
    from msprobe.report.html import write_compare_html

    target, golden = os.path.join(dumps, "target", "dump.json"), os.path.join(dumps, "golden", "dump.json")
    sides = read_sides(target, golden, False)
    table, summary = compare_dumps(*sides, CompareOptions(write_output=False))
    os.makedirs(out, exist_ok=True)
    table_path = os.path.join(out, f"compare_result_bench{'_x' + str(repeat) if repeat > 1 else ''}.csv")
    if repeat > 1:
        table.cells = {name: values * repeat for name, values in table.cells.items()}
        summary.rows *= repeat
        summary.matched *= repeat
        summary.results = {k: v * repeat for k, v in summary.results.items()}
    else:
        write_table(table, table_path)
    started = time.perf_counter()
    page = write_compare_html(table, summary, table_path, target)
    return page, time.perf_counter() - started, len(table)


def measure(page: str, runs: int, screenshot: str | None) -> dict:
    # the DevTools client of the browser tests (tests/html_browser.py), not part of the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
    from html_browser import Browser

    walls, in_page = [], []
    with Browser(width=1400, height=1000, timeout=120) as browser:
        for _ in range(runs):
            browser.send("Page.navigate", {"url": "about:blank"})
            browser.wait_for("document.readyState === 'complete'")
            started = time.perf_counter()
            browser.send("Page.navigate", {"url": "file://" + os.path.abspath(page)}, timeout=120)
            browser.wait_for(READY, timeout=120, interval=0.01)
            walls.append(time.perf_counter() - started)
            in_page.append(browser.evaluate("window.msprobeReport.readyMs") / 1000)
        per_scroll, filter_ms, pool = browser.evaluate(SCROLL_PROBE, timeout=120)
        heap = browser.evaluate("performance.memory ? performance.memory.usedJSHeapSize : null")
        if screenshot:
            browser.evaluate("(function(l){if(l)l.click();})(document.querySelector('#sum-first .link'))")
            browser.evaluate("window.scrollTo(0, 0)")
            browser.screenshot(screenshot)
    return {"wall": walls, "in_page": in_page, "scroll_ms": per_scroll, "filter_ms": filter_ms, "dom_rows": pool,
            "heap_mb": heap / 1e6 if heap else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dumps", default="/tmp/b20", help="synthetic pair (made when missing)")
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--out", default=None, help="where the table and page go (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=3, help="page loads to time (median reported)")
    parser.add_argument("--repeat", type=int, default=1, help="repeat the rows N times (scrolling at ~1M rows)")
    parser.add_argument("--screenshot", help="save a PNG of the ready page here")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.dumps, "target", "dump.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_dumps.py"), "--entries", str(args.entries),
                        args.dumps], check=True, stdout=subprocess.DEVNULL)
    out = args.out or tempfile.mkdtemp(prefix="bench_html_")
    page, build_s, rows = build(args.dumps, out, args.repeat)
    size = os.path.getsize(page) / 1e6
    print(f"rows: {rows}   page: {page}")
    print(f"size: {size:.2f} MB (target <= 15 MB)   build: {build_s:.2f} s")
    figures = measure(page, args.runs, args.screenshot)
    wall, in_page = statistics.median(figures["wall"]), statistics.median(figures["in_page"])
    print(f"ready in headless Chromium: {wall:.2f} s wall from navigation (median of {args.runs}: "
          f"{', '.join(f'{w:.2f}' for w in figures['wall'])}), {in_page:.2f} s in-page performance.now()"
          " (target < 3 s)")
    heap = f", JS heap {figures['heap_mb']:.0f} MB" if figures["heap_mb"] else ""
    print(f"scroll render: {figures['scroll_ms']:.2f} ms per jump ({figures['dom_rows']} row elements in the DOM), "
          f"filter to errors: {figures['filter_ms']:.0f} ms{heap}")
    if args.screenshot:
        print(f"screenshot: {args.screenshot} ({os.path.getsize(args.screenshot) / 1e3:.0f} KB)")
    return 0 if (args.repeat > 1 or (size <= 15 and wall < 3)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
