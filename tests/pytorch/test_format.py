"""Format details of the collector (docs/dump.md): what is recorded, module backward slots and their values checked
against gradients computed in the same process, entry order around in-place ops, and the root config.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from msprobe.pytorch import PrecisionDebugger  # noqa: E402
from msprobe.pytorch.stats import tensor_stats  # noqa: E402

from conftest import count_records  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def dump_of(root: Path, step: int = 0) -> Path:
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return proc


def data_of(root: Path, step: int = 0) -> dict:
    return json.loads((dump_of(root, step) / "dump.json").read_text())["data"]


def run(tmp_path, name, level, task="statistics"):
    zoo.train(name, PrecisionDebugger(dump_path=str(tmp_path / "d"), level=level, task=task), steps=1)
    return data_of(tmp_path / "d")


def saved(tmp_path, data_name: str):
    return torch.load(dump_of(tmp_path / "d") / "dump_tensor_data" / data_name, weights_only=True)


def test_zero_dim_integer_tensors_get_all_four_statistics(tmp_path):
    assert tensor_stats(torch.tensor(7)) == {"Max": 7, "Min": 7, "Mean": 7, "Norm": 7}
    assert tensor_stats(torch.tensor([1, 3]))["Mean"] is None            # n-dim integers: as the reference
    data = run(tmp_path, "cnn", "L1")
    counter = data["Tensor.add_.0.forward"]              # BatchNorm's num_batches_tracked += 1
    assert counter["input_args"][0] | {"requires_grad": False} == {
        "type": "torch.Tensor", "dtype": "torch.int64", "shape": [], "Max": 0, "Min": 0, "Mean": 0, "Norm": 0,
        "requires_grad": False}
    assert counter["output"][0]["Mean"] == 1 and counter["output"][0]["Norm"] == 1


def test_framework_bookkeeping_and_exact_operators_are_not_recorded(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L1")
    x = torch.randn(4, 3, requires_grad=True)
    mask = torch.tensor([True, False, True])
    debugger.start()
    y = x * 2.0
    y = y.detach().requires_grad_()
    inverted = ~mask
    noise = torch.randn(3)
    reflected = torch.ones(2, 4) @ y                       # Tensor.__rmatmul__ -> torch.matmul(other, self)
    y2 = y.clone()
    y2[:, 0] = 3.0
    negated = -y2
    debugger.stop()
    names = list(data_of(tmp_path / "d"))
    assert not [n for n in names if "detach" in n or "invert" in n or "randn" in n or "rmatmul" in n]
    assert "Torch.matmul.0.forward" in names or "Tensor.__matmul__.0.forward" in names
    assert "Tensor.__setitem__.0.forward" in names and "Tensor.__neg__.0.forward" in names
    setitem = data_of(tmp_path / "d")["Tensor.__setitem__.0.forward"]
    assert setitem["output"] == [None] and setitem["input_args"][2] == {"type": "float", "value": 3.0}
    assert inverted.tolist() == [False, True, False] and noise.shape == (3,) and reflected.shape == (2, 3)
    assert negated.shape == (4, 3)


def test_sgd_momentum_initialisation_records_no_detach(tmp_path):
    names = list(run(tmp_path, "cnn", "mix"))
    assert [n for n in names if "detach" in n] == []
    assert "Torch.lstm.0.forward" in run(tmp_path / "rnn", "rnn", "L1")      # kept: the reference misses LSTM


def test_module_backward_slots_follow_the_reference(tmp_path):
    data = run(tmp_path, "rnn", "L0")
    lstm = data["Module.lstm.LSTM.backward.0"]
    # (out, (h, c)) flattened: only out gets a gradient; the input slot is the embedding output
    assert [slot is None for slot in lstm["input"]] == [False, True, True]
    assert [s["shape"] for s in lstm["output"]] == [[3, 5, 6]]
    assert data["Module.emb.Embedding.backward.0"]["output"] == []    # integer ids: no input slot
    data = run(tmp_path / "mha", "mha", "L0")
    attention = data["Module.attn.MultiheadAttention.backward.0"]
    assert len(attention["input"]) == 1                        # attn_output; the weights are None
    assert len(attention["output"]) == 3 and attention["output"][0] == attention["output"][1] == attention["output"][2]


def test_attention_input_gradient_is_the_one_autograd_computes(tmp_path):
    """The same tensor passed as query, key and value: each slot holds its full gradient, and the debugger keeps
    `query is key` (the packed projection), so the gradient is bit-identical to a plain run's."""
    zoo.train("mha", PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L0", task="tensor"), steps=1)
    captured = {}
    model = zoo.build("mha")
    model.attn.register_forward_pre_hook(lambda m, args: captured.setdefault("h", args[0]).retain_grad())
    zoo.train("mha", model=model, steps=1)
    for slot in range(3):
        assert torch.equal(saved(tmp_path, f"Module.attn.MultiheadAttention.backward.0.output.{slot}.pt"),
                           captured["h"].grad)


def test_gradients_around_in_place_ops_are_recorded_and_consistent(tmp_path):
    """conv -> BatchNorm -> ReLU(inplace=True) and a residual `out += identity`: the entries the reference drops
    are there, and their values agree with each other exactly."""
    data = run(tmp_path, "cnn", "L0", task="tensor")
    for name in ("Module.bn.BatchNorm2d.backward.0", "Module.relu.ReLU.backward.0", "Module.block.relu.ReLU.backward.1",
                 "Module.block.BasicBlock.backward.0"):
        assert name in data

    def grad(name):
        return saved(tmp_path, name + ".pt")

    relu_in, relu_out = grad("Module.relu.ReLU.backward.0.input.0"), grad("Module.relu.ReLU.backward.0.output.0")
    activation = grad("Module.relu.ReLU.forward.0.output.0")
    assert torch.equal(relu_out, relu_in * (activation > 0))
    assert torch.equal(grad("Module.bn.BatchNorm2d.backward.0.input.0"), relu_out)   # BN output = ReLU input
    # the block input feeds conv1 and the in-place residual add: the block's input gradient is their sum
    block = grad("Module.block.BasicBlock.backward.0.output.0")
    assert torch.equal(block, grad("Module.block.conv1.Conv2d.backward.0.output.0")
                       + grad("Module.block.relu.ReLU.backward.1.output.0"))


CNN_L0_BACKWARD = [   # the reference's order, plus the BatchNorm/ReLU entries it drops (marked +)
    "Module.fc.Linear.parameters_grad.0", "Module.fc.Linear.backward.0", "Module.pool.AdaptiveAvgPool2d.backward.0",
    "+Module.block.relu.ReLU.backward.1", "Module.block.bn2.BatchNorm2d.parameters_grad.0",
    "+Module.block.bn2.BatchNorm2d.backward.0", "Module.block.conv2.Conv2d.parameters_grad.0",
    "Module.block.conv2.Conv2d.backward.0", "+Module.block.relu.ReLU.backward.0",
    "Module.block.bn1.BatchNorm2d.parameters_grad.0", "+Module.block.bn1.BatchNorm2d.backward.0",
    "Module.block.conv1.Conv2d.parameters_grad.0", "Module.block.conv1.Conv2d.backward.0",
    "Module.block.BasicBlock.backward.0", "+Module.relu.ReLU.backward.0", "Module.bn.BatchNorm2d.parameters_grad.0",
    "+Module.bn.BatchNorm2d.backward.0", "Module.conv.Conv2d.backward.0", "Module.conv.Conv2d.parameters_grad.0"]


def test_backward_entries_come_where_the_reference_puts_them(tmp_path):
    names = [n for n in run(tmp_path, "cnn", "L0") if ".forward." not in n]
    assert names == [n.lstrip("+") for n in CNN_L0_BACKWARD]


def test_shared_module_backward_pairs_with_its_forward_call(tmp_path):
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.a(torch.tanh(self.a(x)))

    torch.manual_seed(0)
    model = Twice()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L0", task="tensor")
    debugger.start(model)
    x = torch.randn(3, 4, requires_grad=True)
    model(x).sum().backward()
    debugger.stop()
    names = [n for n in data_of(tmp_path / "d") if "backward" in n]
    assert names == ["Module.a.Linear.backward.1", "Module.a.Linear.backward.0"]
    # backward.1 is the second call's: its input is the gradient of the model's output (all ones)
    assert torch.equal(saved(tmp_path, "Module.a.Linear.backward.1.input.0.pt"), torch.ones(3, 4))
    assert torch.equal(saved(tmp_path, "Module.a.Linear.backward.0.output.0.pt"), x.grad)


def test_a_failing_hook_is_logged_once_and_training_goes_on(tmp_path, monkeypatch, msprobe_records):
    from msprobe.pytorch.module_hooks import ModuleHooks

    def broken(self, call):
        raise RuntimeError("kaputt")

    monkeypatch.setattr(ModuleHooks, "_write", broken)
    expected = zoo.train("cnn")
    got = zoo.train("cnn", PrecisionDebugger(dump_path=str(tmp_path / "d"), level="mix"))
    assert all(torch.equal(a, b) for a, b in zip(expected[0], got[0]))
    assert all(torch.equal(expected[1][k], got[1][k]) for k in expected[1])
    data = data_of(tmp_path / "d")
    assert "Module.fc.Linear.forward.0" in data and "Module.fc.Linear.backward.0" not in data
    assert count_records(msprobe_records, "kaputt") == 1


def test_root_config_json_is_read_as_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    debugger = PrecisionDebugger(config_path=str(ROOT / "config.json"))
    cfg = debugger.config
    assert (cfg.task, cfg.level, list(cfg.step), cfg.summary_mode) == ("statistics", "L1", [0], "statistics")
    assert cfg.dump_path == str(tmp_path / "dump_data")
    zoo.train("param_ops", debugger, steps=2)
    assert [p.name for p in (tmp_path / "dump_data").iterdir()] == ["step0"]      # step [0] only
    assert "Torch.addmm.0.forward" in data_of(tmp_path / "dump_data")


def test_every_config_key_is_documented():
    config = json.loads((ROOT / "config.json").read_text())
    keys = set(config) | set(config["statistics"])
    docs = (ROOT / "docs" / "dump.md").read_text()
    assert [k for k in sorted(keys) if f"`{k}`" not in docs] == []
    readme = (ROOT / "README.md").read_text()
    assert 'PrecisionDebugger(config_path="config.json")' in readme


def test_a_failing_backward_set_up_keeps_the_forward_entries(tmp_path, monkeypatch):
    import msprobe.pytorch.module_hooks as module_hooks

    def broken(_tensor):
        raise RuntimeError("no edge")

    monkeypatch.setattr(module_hooks, "get_gradient_edge", broken)
    expected = zoo.train("rnn", steps=1)
    got = zoo.train("rnn", PrecisionDebugger(dump_path=str(tmp_path / "d"), level="mix"), steps=1)
    assert all(torch.equal(expected[1][k], got[1][k]) for k in expected[1])
    data = data_of(tmp_path / "d")
    construct = json.loads((dump_of(tmp_path / "d") / "construct.json").read_text())
    assert [n for n in data if n.startswith("Module.") and ".forward." in n] == [
        "Module.emb.Embedding.forward.0", "Module.lstm.LSTM.forward.0", "Module.gru.GRU.forward.0",
        "Module.head.Linear.forward.0"]
    assert not [n for n in data if n.startswith("Module.") and ".backward." in n]
    assert construct["Torch.gru.0.forward"] == "Module.gru.GRU.forward.0"     # the module stack stays right


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_the_pytorch_statistics_are_the_shared_convention(dtype):
    """Issue 32: the same tensor gets the same statistics in the PyTorch and MindSpore collectors (both follow
    msprobe.collect.stats.written_statistics: float64 reductions rounded once to the tensor's dtype)."""
    from msprobe.collect.stats import array_statistics, written_statistics

    torch.manual_seed(3)
    for shape in [(4097,), (16, 33, 7), (1,)]:
        t = (torch.randn(shape) * 3 + 0.5).to(getattr(torch, dtype))
        host = t.float().numpy() if dtype == "bfloat16" else t.numpy()
        expected = written_statistics(host)
        if dtype == "bfloat16":     # numpy has no bfloat16: widened exactly, rounded once to bfloat16
            expected = {k: float(torch.tensor(v, dtype=torch.float64).to(torch.bfloat16).item())
                        for k, v in array_statistics(host).items()}
        if dtype == "float64":      # not rounded: the two summation orders agree to float64's rounding only
            assert tensor_stats(t) == pytest.approx(expected, rel=1e-13)
        else:
            assert tensor_stats(t) == expected


def test_a_large_tensor_is_within_the_statistics_rounding_of_two_collectors():
    """Beyond WIDE_LIMIT elements the PyTorch collector reduces in float32 (speed): its Mean and Norm stay within
    the statistics rounding the verdict allows two collectors (msprobe.compare.stats: 4 + log2(n) units)."""
    import math

    from msprobe.collect.stats import written_statistics
    from msprobe.compare.stats import STATISTICS_ROUNDING_UNITS
    from msprobe.pytorch.stats import WIDE_LIMIT

    torch.manual_seed(4)
    t = torch.randn(4 * WIDE_LIMIT) + 0.25
    ours, shared = tensor_stats(t), written_statistics(t.numpy())
    units = (STATISTICS_ROUNDING_UNITS + math.log2(t.numel())) * 2.0 ** -23
    assert ours["Max"] == shared["Max"] and ours["Min"] == shared["Min"]
    assert abs(ours["Norm"] - shared["Norm"]) <= units * shared["Norm"]
    assert abs(ours["Mean"] - shared["Mean"]) <= units * max(abs(shared["Max"]), abs(shared["Min"]))
