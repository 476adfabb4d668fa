"""The triage zoo (issue 35): plain training scripts with planted bugs, each copied into a fresh folder and triaged
as a user would, with no edit. PyTorch: examples/triage/train.py; MindSpore PyNative:
tests/mindspore_collector/triage_zoo_ms.py (same models: cnn, transformer, lstm; same --bug names). A planted op is
named when the culprit's source line (the user's line that called it) holds the bug's marker text. Used by
tests/triage/test_zoo.py, tests/mindspore_collector/test_triage_ms.py and benchmarks/bench_triage.py."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"pytorch": os.path.join(ROOT, "examples", "triage", "train.py"),
           "mindspore": os.path.join(ROOT, "tests", "mindspore_collector", "triage_zoo_ms.py")}
MODELS = ("cnn", "transformer", "lstm")
# bug -> texts, one of which the planted line holds (MindSpore's eps is set where the LayerNorm cell is built: the
# culprit's line is the call of that cell)
MARKERS = {"cast": ("half()", "float16"), "eps": ("layer_norm", "self.norm("), "bias": ("self.hidden.weight)",),
           "softmax": ("softmax",), "scale": ("* 1.02",), "bf16acc": ("bfloat16", "float16"),
           "nondet": ("dropout",), "nan": ("log(",)}
BUGS = tuple(MARKERS)


def hit(findings, bug: str) -> bool:
    """The planted op is named (a culprit whose source line holds the bug's marker); for `none`, nothing is."""
    if bug == "none":
        return findings.culprit is None
    return findings.culprit is not None and any(marker in findings.source for marker in MARKERS[bug])


def triage_case(framework: str, model: str, bug: str, work: str, python: str = sys.executable, extra: str = "",
                **options):
    """One triage in a fresh folder under `work` (the script copied there as train.py; the commands run there):
    `--bug B` against the clean script; `nondet` alone (the same command twice); `none`: the clean script against
    itself; `extra`: more options of both commands (MindSpore: `--train onestep --mode graph`). Returns (findings,
    seconds, folder)."""
    import msprobe

    folder = tempfile.mkdtemp(prefix=f"{model}_{bug}_", dir=work)
    shutil.copy(SCRIPTS[framework], os.path.join(folder, "train.py"))
    command = f"{python} train.py --model {model}" + (f" {extra}" if extra else "")
    target = f"{command} --bug {bug}" if bug != "none" else command
    golden = None if bug == "nondet" else command
    options.setdefault("timeout", 300)
    start = time.perf_counter()
    findings = msprobe.triage(target, golden, output_dir=os.path.join(folder, "out"), cwd=folder,
                              framework=framework, **options)
    return findings, time.perf_counter() - start, folder
