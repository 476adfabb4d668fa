"""The triage zoo (issues 35, 40): plain training scripts with planted bugs, each copied into a fresh folder and
triaged as a user would, with no edit. PyTorch: examples/triage/train.py; MindSpore PyNative:
tests/mindspore_collector/triage_zoo_ms.py (same models: cnn, transformer, lstm; same --bug names, MindSpore has
`noisy` too). `amp=True` runs the target under mixed precision (PyTorch bfloat16 autocast, MindSpore
auto_mixed_precision O2) against a float32 golden. A planted op is named when the culprit's source line (the user's
line that called it, or a module culprit's forward definition) holds the bug's marker text; a dtype bug (a float16
linear, a bfloat16 accumulator) when the runs are found to differ in dtype (outcome `dtype`, no culprit) from the
planted line, or named as a dtype/cast culprit. Used by tests/triage/test_zoo.py,
tests/mindspore_collector/test_triage_ms.py and benchmarks/bench_triage.py."""

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
# culprit's line is the call of that cell; a module-level culprit's line is its forward's definition)
MARKERS = {"cast": ("half()", "float16"), "eps": ("layer_norm", "self.norm("), "bias": ("self.hidden.weight)",),
           "softmax": ("softmax",), "scale": ("* 1.02",), "bf16acc": ("bfloat16", "float16"),
           "nondet": ("dropout",), "nan": ("log(",), "bn_eps": ("self.bn(",), "residual": ("class Mix",),
           "rootscale": ("* 1.5",), "noisy": ("mint.add",), "data": ("self.conv1(images)", "self.embed(tokens)")}
BUGS = {"pytorch": tuple(bug for bug in MARKERS if bug != "noisy"), "mindspore": tuple(MARKERS)}
# the planted bugs a mixed-precision target is triaged with (a cast or a low-precision accumulator is what the
# mixed precision itself does; the same command twice has no golden)
AMP_BUGS = ("eps", "bias", "softmax", "scale", "nan", "bn_eps", "residual", "rootscale", "noisy", "data")
DTYPE_BUGS = ("cast", "bf16acc")
# bug -> the category of cause the evidence must give (a dtype bug: outcome dtype, or a dtype/cast culprit)
CATEGORIES = {"cast": "dtype/cast", "eps": "argument", "bias": "argument", "softmax": "argument", "scale": "argument",
              "bf16acc": "dtype/cast", "nondet": "nondeterminism", "nan": "nan/inf", "bn_eps": "argument",
              "residual": "module code", "rootscale": "argument", "noisy": "input", "data": "input", "none": None}


def hit(findings, bug: str) -> bool:
    """The planted op is named (a culprit whose source line holds the bug's marker; a dtype bug: the dtype change
    found there); for `none`, nothing is."""
    if bug == "none":
        return findings.culprit is None
    if bug in DTYPE_BUGS and findings.outcome == "dtype":
        return any(marker in (findings.dtype_change or {}).get("source", "") for marker in MARKERS[bug])
    return findings.culprit is not None and any(marker in findings.source for marker in MARKERS[bug])


def right_category(findings, bug: str) -> bool:
    """The category of cause is the planted bug's (a dtype bug: outcome dtype or category dtype/cast)."""
    if bug in DTYPE_BUGS and findings.outcome == "dtype":
        return True
    return findings.category == CATEGORIES[bug]


def judged_case(framework: str, case: tuple, tmp_path_factory) -> tuple:
    """(case, findings) of one (model, bug, amp) case of a zoo test's table, triaged in a fresh folder."""
    model, bug, amp = case
    work = str(tmp_path_factory.mktemp(f"judged_{framework}"))
    return case, triage_case(framework, model, bug, work, amp=amp)[0]


def check_named(findings, bug: str, expected: tuple) -> None:
    """The planted op is named (or nothing, for `none`), with the expected (outcome, category)."""
    assert hit(findings, bug), (findings.outcome, findings.culprit, findings.source, findings.dtype_change)
    assert (findings.outcome, findings.category) == expected


def triage_case(framework: str, model: str, bug: str, work: str, python: str = sys.executable, amp: bool = False,
                extra: str = "", **options):
    """One triage in a fresh folder under `work` (the script copied there as train.py; the commands run there):
    `--bug B` against the clean script; `nondet` alone (the same command twice); `none`: the clean script against
    itself; amp: the target with --amp (mixed precision) against the clean float32 script; `extra`: more options of
    both commands (MindSpore: `--train onestep --mode graph`). Returns (findings,
    seconds, folder)."""
    import msprobe

    folder = tempfile.mkdtemp(prefix=f"{model}_{bug}{'_amp' if amp else ''}_", dir=work)
    shutil.copy(SCRIPTS[framework], os.path.join(folder, "train.py"))
    command = f"{python} train.py --model {model}" + (f" {extra}" if extra else "")
    target = command + (" --amp" if amp else "") + (f" --bug {bug}" if bug != "none" else "")
    golden = None if bug == "nondet" else command
    options.setdefault("timeout", 300)
    start = time.perf_counter()
    findings = msprobe.triage(target, golden, output_dir=os.path.join(folder, "out"), cwd=folder,
                              framework=framework, **options)
    return findings, time.perf_counter() - start, folder
