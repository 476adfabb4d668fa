"""Benchmark `msprobe code_mapping` on the refdata MindSpore graph case (the reference 8.3.3 took about 8.5 s).

    python benchmarks/bench_code_mapping.py /work/shared/refdata            # refdata root or its mindspore/graph
    python benchmarks/bench_code_mapping.py /work/shared/refdata --synthetic-mb 100

Extracts l2_tensor.tar.gz (1178 .npy files) into a temporary directory, runs the command as a child process
(interpreter start-up included) with each IR, and prints the best wall time of --repeat runs and the peak RSS.
--synthetic-mb N also builds an IR of about N MB by repeating the real subgraph under new names and scopes, and
binds the same dump to it (a stand-in for the 100 MB IR sets MindSpore writes).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path


def graph_dir(root: str) -> Path:
    for candidate in (Path(root), Path(root) / "mindspore" / "graph", Path(root) / "graph"):
        if (candidate / "l2_tensor.tar.gz").is_file():
            return candidate
    raise SystemExit(f"no l2_tensor.tar.gz under {root} (give the refdata root or its mindspore/graph folder)")


def run_once(ir: Path, data: Path, output: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `msprobe code_mapping` child process."""
    command = [sys.executable, "-m", "msprobe", "code_mapping", "--ir", str(ir), "--dump_data", str(data),
               "--output", str(output)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"code_mapping failed ({done.returncode}): {done.stderr.strip()}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def synthetic_ir(source: Path, target: Path, megabytes: int) -> int:
    """An IR of about `megabytes` MB: the real subgraph repeated, each copy with its own keys and scopes."""
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        text = handle.read()
    start, end = text.index("subgraph @"), text.index("\n}\n") + 3
    head, body = text[:start], text[start:end]
    copies = 0
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(head)
        while handle.tell() < megabytes * 1024 * 1024:
            renamed = re.sub(r"subgraph @(\S+?)\(", rf"subgraph @\g<1>_{copies}(", body, count=1)
            renamed = re.sub(r"\((CNode_|equiv_)", rf"(c{copies}_\g<1>", renamed)
            if copies:
                renamed = renamed.replace("(Default/", f"(Default/copy{copies}/").replace(
                    "(Gradients/", f"(Gradients/copy{copies}/")
            handle.write(renamed)
            copies += 1
    return copies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("refdata", help="refdata root (or its mindspore/graph folder)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best wall time is reported")
    parser.add_argument("--synthetic-mb", type=int, default=0, metavar="N", help="also bind to an N MB IR")
    args = parser.parse_args()
    graph = graph_dir(args.refdata)
    with tempfile.TemporaryDirectory(prefix="bench_code_mapping_") as work:
        work = Path(work)
        with tarfile.open(graph / "l2_tensor.tar.gz") as archive:
            archive.extractall(work, filter="data")
        rank = work / "l2_tensor" / "dump" / "rank_0"
        data = rank / "Net" / "0" / "0"
        files = sum(1 for name in os.listdir(data) if name.endswith(".npy"))
        cases = [("graph_build_0_0094.ir.gz", graph / "graph_build_0_0094.ir.gz"),
                 ("ms_output_trace_code_graph_0.ir", rank / "graphs" / "ms_output_trace_code_graph_0.ir")]
        if args.synthetic_mb:
            big = work / f"synthetic_{args.synthetic_mb}mb.ir"
            copies = synthetic_ir(graph / "graph_build_0_0094.ir.gz", big, args.synthetic_mb)
            cases.append((f"{big.name} ({copies} subgraphs, {big.stat().st_size / 1e6:.0f} MB)", big))
        print(f"code_mapping: {files} .npy files; best of {args.repeat} runs (child process, start-up included)")
        for label, ir in cases:
            runs = [run_once(ir, data, work / "out") for _ in range(args.repeat)]
            wall = min(run[0] for run in runs)
            peak = max(run[1] for run in runs)
            print(f"  {label:<60} wall {wall:6.2f} s   peak RSS {peak:7.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
