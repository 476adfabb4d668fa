"""The triage keeps the compare core's judgement on MindSpore dumps (issue 40), made in process by our MindSpore
collector (BatchNorm's auxiliary outputs, which MindSpore's CPU kernel writes differently from call to call, are not
judged), then round 1 of `msprobe triage -tp/-gp`: a NoisyDense (a Dense, then `mint.add`
of a delta built from NumPy that differs between the runs) is named at its `Mint.add`, not as a cell the golden
"does not call"; a float16 target (auto_mixed_precision O2) against a float32 golden is a dtype difference with no
culprit, and a BatchNorm epsilon planted in it is an argument of a Primitive whose attributes the dump does not
record."""

from __future__ import annotations

import pytest

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore tests run in "
                                        "the separate environment of .ci/run)")

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindspore import Tensor, nn, ops  # noqa: E402
from triage_zoo_ms import NoisyDense  # noqa: E402  (the zoo's: a Dense, then mint.add of a NumPy delta)

import msprobe  # noqa: E402
from msprobe.triage import classify as cl  # noqa: E402


class Net(nn.Cell):
    def __init__(self, bug: str):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.bn = nn.BatchNorm1d(16, eps=1e-1 if bug == "eps" else 1e-5)
        self.proj = NoisyDense(16, 0.3 if bug == "noisy" else 0.0)
        self.out = nn.Dense(16, 4)

    def construct(self, x):
        h = ops.relu(self.bn(self.fc1(x)))
        return self.out(self.proj(h))


def _dump(root, bug: str, amp: bool) -> str:
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(0)
    net = Net(bug)
    net.set_train()
    if amp:
        net = ms.amp.auto_mixed_precision(net, "O2")
    rng = np.random.default_rng(1)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
    y = Tensor(rng.integers(0, 4, (4,)).astype(np.int32))
    grad_fn = ms.value_and_grad(lambda a, b: ops.cross_entropy(net(a).astype(ms.float32), b), None,
                                net.trainable_params())
    debugger = PrecisionDebugger(dump_path=str(root), level="mix")
    with debugger.step_scope(net):
        grad_fn(x, y)
    (folder,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    return str(folder / "dump.json")


pytestmark = pytest.mark.slow
CASES = {"noisy": ("noisy", False), "clean_amp": ("none", True), "eps_amp": ("eps", True)}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("ms_judgement")
    golden = _dump(root / "golden", "none", False)
    return {case: msprobe.triage(target_dump=_dump(root / case, bug, amp), golden_dump=golden,
                                 output_dir=str(root / f"out_{case}"))
            for case, (bug, amp) in CASES.items()}


def test_a_noisy_dense_is_named_at_its_add(judged):
    findings = judged["noisy"]
    assert findings.culprit == "Mint.add.0.forward" and findings.module == "Cell.proj.NoisyDense.forward.0"
    assert findings.category == cl.INPUT and "already differ" in findings.reason
    assert "does not call" not in findings.reason
    assert "triage_zoo_ms.py" in findings.source and "mint.add(y, delta)" in findings.source
    assert any("Inside it the runs first part at Mint.add.0.forward" in line for line in findings.rounds[0]["evidence"])


def test_a_float16_amp_target_is_a_dtype_difference(judged):
    findings = judged["clean_amp"]
    assert findings.outcome == cl.DTYPE_ONLY and findings.culprit is None and findings.exit_code == 0
    assert "float16 in the target" in findings.dtype_change["dtypes"]
    assert "test_triage_judgement_ms.py" in findings.dtype_change["source"]


def test_a_batchnorm_epsilon_in_the_amp_pair_is_a_primitives_argument(judged):
    findings = judged["eps_amp"]
    assert findings.culprit.startswith("Primitive.") and "BatchNorm" in findings.culprit
    assert findings.category == cl.ARGUMENT and "attributes" in findings.reason
    assert "self.bn(" in findings.source and "build" in findings.advice

