"""The triage keeps the compare core's judgement (issue 40), on statistics dumps made in process by our PyTorch
collector (round 1 of `msprobe triage -tp/-gp`, no training command): a bfloat16-autocast target against a float32
golden is a dtype difference, not a culprit, while a BatchNorm eps planted in that pair is an argument; a block whose
residual add is dropped is the module's own code, pointed at its forward's definition; an op the golden never calls
outside every module is named with the op reading its output as the golden's counterpart (so that round 2 has
something to compare); model inputs three times the golden's enter at the first op."""

from __future__ import annotations

import inspect
import json
import os

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

import msprobe  # noqa: E402
from msprobe.triage import classify as cl  # noqa: E402


class Block(nn.Module):
    """norm -> fc1 -> gelu -> fc2, plus the residual (dropped with bug `residual`, scaled by an extra op with
    `extra`)."""

    def __init__(self, bug: str):
        super().__init__()
        self.bug = bug
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.norm(x))))
        return h if self.bug == "residual" else x + h


class Net(nn.Module):
    """conv -> BatchNorm -> in-place ReLU -> pool -> linear embed -> block -> linear out."""

    def __init__(self, bug: str):
        super().__init__()
        self.bug = bug
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, eps=1e-1 if bug == "eps" else 1e-5)
        self.embed = nn.Linear(8, 16)
        self.block = Block(bug)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)), inplace=True).mean(dim=(2, 3))
        h = self.embed(x)
        if self.bug == "extra":
            h = h * 1.5                    # an op the golden never calls, in the model's own forward
        return self.out(self.block(h))


def _dump(root, bug: str, amp: bool, level: str = "mix") -> str:
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    model = Net(bug)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 4, (4,), generator=g)
    if bug == "data":
        x = x * 3
    debugger = PrecisionDebugger(task="statistics", level=level, dump_path=str(root))
    debugger.start(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    F.cross_entropy(logits.float(), y).backward()
    debugger.stop()
    (folder,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    return str(folder / "dump.json")


CASES = {"clean_amp": ("none", True), "eps_amp": ("eps", True), "residual": ("residual", False),
         "extra": ("extra", False), "data": ("data", False)}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("judgement")
    golden = _dump(root / "golden", "none", False)
    found = {}
    for case, (bug, amp) in CASES.items():
        target = _dump(root / case, bug, amp)
        found[case] = msprobe.triage(target_dump=target, golden_dump=golden, output_dir=str(root / f"out_{case}"))
    return found


def test_a_bf16_autocast_target_is_a_dtype_difference_not_a_culprit(judged):
    findings = judged["clean_amp"]
    assert findings.outcome == cl.DTYPE_ONLY and findings.culprit is None and findings.category is None
    assert findings.exit_code == 0
    assert "differ in dtype" in findings.note and "what that dtype explains" in findings.note
    change = findings.dtype_change
    assert change["op"] == "Functional.conv2d.0.forward" and "bfloat16 in the target" in change["dtypes"]
    assert "test_judgement.py" in change["source"] and "self.conv(x)" in change["source"]
    assert len(findings.rounds) == 1 and "no op introduces error beyond the dtypes" in findings.rounds[0]["evidence"][0]
    text = "\n".join(findings.lines())
    assert "no culprit" in text and "culprit Functional" not in text
    with open(os.path.join(findings.output_dir, "triage.json"), encoding="utf-8") as handle:
        saved = json.load(handle)
    assert saved["outcome"] == "dtype" and saved["culprit"] is None and saved["dtype_change"]["op"] == change["op"]


def test_a_batchnorm_eps_in_the_autocast_pair_is_an_argument(judged):
    findings = judged["eps_amp"]
    assert findings.culprit == "Functional.batch_norm.0.forward" and findings.outcome == cl.CULPRIT
    assert findings.category == cl.ARGUMENT and "0.1" in findings.reason and "1e-05" in findings.reason
    assert "dtype" not in findings.advice.split(":")[0]           # not "run it in the golden's dtype"
    assert findings.module == "Module.bn.BatchNorm2d.forward.0"


def test_a_dropped_residual_is_the_modules_own_code_at_its_forward(judged):
    findings = judged["residual"]
    assert findings.culprit == "Module.block.Block.forward.0" and findings.category == cl.MODULE_CODE
    line = inspect.getsourcelines(Block.forward)[1]
    assert findings.source.endswith(f"test_judgement.py, line {line}, def forward of class Block")
    assert "Tensor.__add__ once in the golden, never in the target" in findings.reason
    assert "golden run does not call" not in findings.reason
    assert "at the source line above" in findings.advice


def test_an_op_the_golden_never_calls_outside_every_module(judged, tmp_path):
    """`h * 1.5` in the model's own forward: named, and -da's next dump gives the golden the op reading its output
    (the golden's own dump would otherwise hold nothing and round 2 fail)."""
    findings = judged["extra"]
    assert findings.culprit.startswith("Tensor.__mul__.") and findings.category == cl.ARGUMENT
    assert "does not call" in findings.reason and "* 1.5" in findings.source and findings.module is None
    out = tmp_path / "da"
    round1 = findings.rounds[0]["commands"][-1]
    target, golden = round1.split(" -tp ")[1].split(" -gp ")
    golden = golden.split(" -o ")[0]
    analysis = msprobe.diff_analyze(target, golden)
    culprit = analysis.culprit
    assert culprit["cause"] == "extra op" and culprit["reader"] == culprit["golden_reader"]
    assert culprit["golden_reader"].startswith("Functional.layer_norm.")
    golden_list = analysis.next_dump_golden["tensor"]["list"]
    assert culprit["golden_reader"] in golden_list and not any(name.startswith("Tensor.__mul__") for name in golden_list)
    assert {culprit["op_name"], culprit["reader"]} <= set(analysis.next_dump["tensor"]["list"])
    assert not out.exists()


def test_inputs_three_times_the_goldens_enter_at_the_first_op(judged):
    findings = judged["data"]
    assert findings.culprit == "Functional.conv2d.0.forward" and findings.category == cl.INPUT
    assert "already differ" in findings.reason and "rounding" not in findings.reason
    assert "the data" in findings.advice


@pytest.mark.parametrize("has_source", [True, False])
def test_the_advice_points_at_a_source_line_only_when_one_is_shown(has_source):
    for key in (*cl.ADVICE, ):
        text = cl.advice(key, has_source, "Cell.a.B.forward.0")
        assert ("source line above" in text) == (has_source and "{where}" in cl.ADVICE[key])
    assert ("source line above" in cl.dtype_only_advice(has_source)) == has_source


def _round2_head(origins, cause, inputs_differ=True):
    from msprobe.triage import loop, rounds

    rows = [{"NPU Name": "Functional.conv2d.0.forward.input.0", "Cosine": 1.0 if not inputs_differ else 0.9,
             "MaxAbsErr": 0.0 if not inputs_differ else 2.0, "Result": "pass"},
            {"NPU Name": "Functional.conv2d.0.forward.output.0", "Cosine": 0.9, "MaxAbsErr": 3.0, "Result": "pass",
             "Error_Origin": origins[0]}]
    second = rounds.Tensors(rows=rows, inputs_differ=inputs_differ, outputs_differ=True, output_origins=origins)
    first = rounds.Statistics(differs=True, culprit="Functional.conv2d.0.forward", cause=cause)
    named = cl.judge(first, False)
    return loop._round2_record(second, first, named)["evidence"]


def test_round_two_reads_the_tensors_verdict_by_what_round_one_named():
    """An op named because the difference enters at its inputs (other data, a tensor no dumped op makes): the real
    tensors confirming that its output differs by what its inputs explain say so, not that the difference "comes
    from upstream" (what they say of an op the statistics took for making an error of its own)."""
    head, *rows = _round2_head(["inherited"], cl.CAUSE_ENTERS)
    assert head.startswith("its inputs already differ, its outputs differ by what they explain")
    assert head.endswith("the difference enters at its inputs") and "upstream" not in head
    assert rows[0].startswith("Functional.conv2d.0.forward.input.0: cosine 0.9")
    head, *_ = _round2_head(["inherited"], "")
    assert "upstream" in head
    head, *_ = _round2_head(["introduced"], "", inputs_differ=False)
    assert head == "its inputs are identical, its outputs differ"


def test_a_framework_module_with_nothing_recorded_inside(tmp_path):
    """At level L0 (as in MindSpore's GRAPH_MODE, where a cell's primitives are not recorded) a BatchNorm whose eps
    differs is a module culprit with nothing recorded inside it and no definition in the user's files: how it is
    built, category argument, at the user's line that calls it (not "the module's own code between its
    children")."""
    torch.set_num_threads(1)
    golden = _dump(tmp_path / "golden", "none", False, "L0")
    target = _dump(tmp_path / "target", "eps", False, "L0")
    findings = msprobe.triage(target_dump=target, golden_dump=golden, output_dir=str(tmp_path / "out"))
    assert findings.culprit == "Module.bn.BatchNorm2d.forward.0" and findings.category == cl.ARGUMENT
    assert "how it is built" in findings.reason and "between its children" not in findings.reason
    assert "self.bn(self.conv(x))" in findings.source and "test_judgement.py" in findings.source
    assert "constructor's arguments" in findings.advice and "at the source line above" in findings.advice
    # inputs three times the golden's at L0: the first module's input is where the difference enters, not its build
    findings = msprobe.triage(target_dump=_dump(tmp_path / "data", "data", False, "L0"), golden_dump=golden,
                              output_dir=str(tmp_path / "out_data"))
    assert findings.culprit == "Module.conv.Conv2d.forward.0" and findings.category == cl.INPUT
    assert "self.conv(x)" in findings.source
