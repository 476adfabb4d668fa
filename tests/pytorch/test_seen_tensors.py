"""A tensor's statistics are computed once while it stays unchanged (SeenTensors), and the dump is the same as
when every record is computed afresh: outputs taken by later calls, parameters taken by the forward and by the
optimizer, and every way a tensor can change under the collector (in place, through .data, batch-norm running
statistics, memory handed to numpy, the optimizer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from msprobe.pytorch import PrecisionDebugger, seed_all  # noqa: E402
from msprobe.pytorch import stats as stats_module  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = self.fc(x)
        h = torch.relu(h) + 0.0             # the output of fc taken unchanged, relu's by the add
        h.add_(0.5)                         # changed in place: its next record is computed again
        h = self.bn(h)                      # running statistics written without moving their version counter
        mean_again = self.bn.running_mean * 2      # ... and read after that write
        self.fc.weight.data.mul_(1.0)       # a write through .data (same values, but seen as a write)
        array = h.detach().numpy()          # memory handed out, written behind torch's back
        array += 1.0
        h = h + mean_again                  # h as numpy left it
        scaled = self.out.weight * 1.0      # out.weight recorded ...
        torch._foreach_mul_([self.out.weight.data], 1.5)     # ... then written by an unrecorded call through .data
        extra = torch.tanh(self.fc.weight) + scaled[:, :1].sum()     # fc.weight taken again after fc used it
        return self.out(h), extra


def _train(dump_path: Path, steps: int = 2) -> list:
    torch.set_num_threads(1)
    seed_all(7)
    model = _Net()
    opts = [torch.optim.SGD(model.fc.parameters(), lr=0.1, momentum=0.9),       # reads .grad, momentum buffers
            torch.optim.AdamW([*model.bn.parameters(), *model.out.parameters()], lr=0.01)]
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(dump_path))
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    losses = []
    for _ in range(steps):
        debugger.start(model=model)
        out, extra = model(x)
        loss = out.square().mean() + extra.sum() * 1e-3
        loss.backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
        debugger.stop()
        debugger.step()
        losses.append(loss.item())
    return losses


def _entries(root: Path) -> dict:
    found = {}
    for path in sorted(root.glob("step*/*/dump.json")):
        found[path.parent.parent.name] = json.loads(path.read_text())["data"]
    return found


def test_reused_statistics_give_the_dump_computed_afresh(tmp_path, monkeypatch):
    computed = []
    content = stats_module._content

    def counting(t, summary_mode):
        computed.append(t.numel())
        return content(t, summary_mode)

    monkeypatch.setattr(stats_module, "_content", counting)
    losses = _train(tmp_path / "reused")
    reused = _entries(tmp_path / "reused")
    with_reuse = len(computed)

    computed.clear()
    monkeypatch.setattr(stats_module.SeenTensors, "get", lambda self, t, remember=False: (None, None))
    fresh_losses = _train(tmp_path / "fresh")
    fresh = _entries(tmp_path / "fresh")

    assert losses == fresh_losses
    assert list(reused) == ["step0", "step1"] and reused.keys() == fresh.keys()
    for step in fresh:
        assert list(reused[step]) == list(fresh[step])
        for name, entry in fresh[step].items():
            assert json.dumps(reused[step][name]) == json.dumps(entry), name
    assert with_reuse < len(computed)       # something was reused (outputs and parameters taken again)


def test_a_parameter_taken_by_two_calls_unchanged_is_reduced_once(tmp_path, monkeypatch):
    weight = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))
    reduced = []
    content = stats_module._content
    monkeypatch.setattr(stats_module, "_content",
                        lambda t, mode: (reduced.append(t.data_ptr()), content(t, mode))[1])
    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=str(tmp_path / "d"))
    debugger.start()
    torch.tanh(weight)
    torch.sigmoid(weight)                   # the same parameter, unchanged: its record is reused
    with torch.no_grad():
        weight.mul_(2.0)                    # changed: reduced again by the next call
    torch.relu(weight)
    debugger.stop()
    debugger.step()
    assert reduced.count(weight.data_ptr()) == 2        # tanh's input, mul_'s output (= relu's input)
    (step,) = _entries(tmp_path / "d").values()
    tanh_in = step["Torch.tanh.0.forward"]["input_args"][0]
    sigmoid_in = step["Torch.sigmoid.0.forward"]["input_args"][0]
    relu_in = step["Torch.relu.0.forward"]["input_args"][0]
    assert tanh_in == sigmoid_in
    assert relu_in["Max"] == pytest.approx(2 * tanh_in["Max"], rel=1e-6)
