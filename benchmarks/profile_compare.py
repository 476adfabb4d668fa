#!/usr/bin/env python3
"""Time (and size) the stages of one `msprobe compare` run in-process, without profiler overhead.

The stage functions of msprobe are wrapped (monkey-patched in this process only) with timers that also
record the resident set size after each call; nothing in msprobe/ is changed.

    python benchmarks/profile_compare.py benchmarks/data/stats_20k [--xlsx] [--gc] [--tracemalloc]

The cyclic garbage collector is paused, as `msprobe` pauses it while a command runs; --gc leaves it on.
--tracemalloc report the peak of Python allocations per stage (slow; times are then meaningless)
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import resource
import sys
import tempfile
import time
import tracemalloc


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


RECORDS: list = []
_DEPTH = [0]


def timed(label, func, trace=False):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        depth = _DEPTH[0]
        _DEPTH[0] += 1
        if trace and depth == 0:
            tracemalloc.reset_peak()
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            _DEPTH[0] -= 1
            traced = tracemalloc.get_traced_memory()[1] / 1e6 if trace else None
            RECORDS.append((depth, label, elapsed, cpu, rss_mb(), traced))
    return wrapper


def install(trace: bool) -> None:
    from msprobe.compare import pipeline
    from msprobe.table import csv_writer, xlsx_writer

    patches = [
        (pipeline, "read_dump", "read_dump (json parse + stack.json)"),
        (pipeline, "flatten", "flatten (items table)"),
        (pipeline, "match_items", "match_items"),
        (pipeline, "match_exact", "  match_exact"),
        (pipeline, "build_table", "build_table"),
        (pipeline, "stat_diff", "  stat_diff (x4)"),
        (pipeline, "stack_column", "  stack_column"),
        (pipeline, "measure_tensors", "  measure_tensors"),
        (pipeline, "judge", "judge (rules)"),
        (pipeline, "error_origin_column", "error_origin_column"),
        (pipeline, "judge_table", "judge_table (verdict: rules, Error_Origin, notes, culprit)"),
        (pipeline, "advise", "advise"),
        (pipeline, "write_table", "write_table"),
        (csv_writer, "table_texts", "  table_texts (cell_text of every cell)"),
        (csv_writer, "check_cells", "  check_cells (formula scan)"),
        (csv_writer, "write_csv", "  write_csv (all)"),
        (xlsx_writer, "check_cells", "  check_cells (formula scan)"),
        (xlsx_writer, "write_xlsx", "  write_xlsx (all)"),
    ]
    for module, name, label in patches:  # msprobe changes: wrap what exists, skip what does not
        if callable(getattr(module, name, None)):
            setattr(module, name, timed(label, getattr(module, name), trace))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="directory holding target/dump.json and golden/dump.json")
    parser.add_argument("--xlsx", action="store_true", help="write xlsx (default: csv)")
    parser.add_argument("--gc", action="store_true", help="leave the cyclic garbage collector on")
    parser.add_argument("--tracemalloc", action="store_true", help="record peak Python allocations per stage")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if not args.gc:
        gc.disable()
    started, started_cpu = time.perf_counter(), time.process_time()
    from msprobe.compare.pipeline import CompareOptions, compare_files
    from msprobe.log import setup_logging

    import_seconds, import_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    install(args.tracemalloc)
    if args.tracemalloc:
        tracemalloc.start()
    os.environ.setdefault("MSPROBE_LOG_LEVEL", "2")
    setup_logging()
    with tempfile.TemporaryDirectory(prefix="msprobe_prof_") as out:
        kwargs = {"output_dir": out, "output_format": "xlsx" if args.xlsx else "csv", "compare_only": True,
                  "jobs": args.jobs}
        options = CompareOptions(**kwargs)
        begin, begin_cpu = time.perf_counter(), time.process_time()
        summary = compare_files(os.path.join(args.dataset, "target", "dump.json"),
                                os.path.join(args.dataset, "golden", "dump.json"), options)
        total, total_cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
    print(f"dataset {args.dataset}: {summary.rows} rows, format {'xlsx' if args.xlsx else 'csv'}, "
          f"gc {'on' if args.gc else 'off'}; imports {import_seconds:.2f} s (CPU {import_cpu:.2f} s)")
    header = f"{'stage':44s} {'seconds':>8s} {'CPU s':>8s} {'RSS after MB':>13s}"
    if args.tracemalloc:
        header += f" {'py peak MB':>11s}"
    print(header)
    for _depth, label, elapsed, cpu, rss, traced in _ordered(RECORDS):
        line = f"{label:44s} {elapsed:8.3f} {cpu:8.3f} {rss:13.0f}"
        if traced is not None:
            line += f" {traced:11.0f}"
        print(line)
    print(f"{'compare_files total':44s} {total:8.3f} {total_cpu:8.3f} {rss_mb():13.0f}   (peak RSS {peak_mb():.0f} MB)")
    return 0


def _ordered(records):
    """Children are recorded before their parent; put each parent before its children."""
    out, pending = [], []
    for record in records:
        if record[0] == 0:
            out.append(record)
            out.extend(pending)
            pending = []
        else:
            pending.append(record)
    return out + pending


if __name__ == "__main__":
    sys.exit(main())
