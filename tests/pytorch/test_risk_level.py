"""`risk_level` of the PyTorch collector (msprobe/pytorch/hooks.py risk_allows), as the reference's reads it: FOCUS
(the default) leaves out the low-risk APIs (casts, views, shape changes: counted, not dumped), ALL dumps them with
their arguments and backward, CORE dumps matrix products, convolutions, normalisations, embeddings and attention
only; a `list` or `scope` decides alone. Training stays bit-identical at every level."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from msprobe.pytorch import PrecisionDebugger  # noqa: E402


class Net(torch.nn.Module):
    """A linear, then the shape changes and casts of an attention's head split, a layer norm, a softmax."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.norm = torch.nn.LayerNorm(3)

    def forward(self, x):
        y = self.lin(x).reshape(2, 3, 3, 2).permute(0, 2, 1, 3)
        a, b = torch.split(y, 2, dim=1)
        z = torch.transpose(a, 1, 2).to(torch.float64).to(torch.float32)
        return torch.softmax(z, -1).sum() + self.norm(b.reshape(2, 2, 3)).sum()


def run(tmp_path, dump=True, **config):
    """(loss, gradients, dump.json's data or None) of one training step, dumped with `config` when `dump`."""
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(2, 3, 4, requires_grad=True)
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level="L1", **config) if dump else None
    if debugger:
        debugger.start(model)
    loss = model(x)
    loss.backward()
    if debugger:
        debugger.stop()
    grads = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    data = None
    if debugger:
        (folder,) = (tmp_path / "dump" / "step0").iterdir()
        data = json.loads((folder / "dump.json").read_text())["data"]
    return loss.detach().clone(), grads, data


LOW = ("Tensor.reshape.", "Tensor.permute.", "Torch.split.", "Torch.transpose.", "Tensor.to.")


def test_risk_level_all_dumps_the_low_risk_apis_with_their_arguments_and_backward(tmp_path):
    _, _, focus = run(tmp_path / "focus")
    assert not [n for n in focus if n.startswith(LOW)]             # the default: counted, not dumped
    assert "Torch.softmax.0.forward" in focus and "Functional.linear.0.backward" in focus
    _, _, data = run(tmp_path / "all", risk_level="ALL")
    assert set(focus) < set(data)
    for name in ("Tensor.reshape.0", "Tensor.permute.0", "Torch.split.0", "Torch.transpose.0", "Tensor.to.0",
                 "Tensor.to.1", "Tensor.reshape.1"):
        assert f"{name}.forward" in data and f"{name}.backward" in data, name
    reshape = data["Tensor.reshape.0.forward"]
    assert reshape["input_args"][0]["shape"] == [2, 3, 6]
    assert [a["value"] for a in reshape["input_args"][1:]] == [2, 3, 3, 2]
    assert reshape["output"][0]["shape"] == [2, 3, 3, 2]
    cast = data["Tensor.to.0.forward"]
    assert cast["input_args"][1] == {"type": "torch.dtype", "value": "torch.float64"}
    assert cast["output"][0]["dtype"] == "torch.float64"
    split = data["Torch.split.0.forward"]
    assert [o["shape"] for o in split["output"]] == [[2, 2, 3, 2], [2, 1, 3, 2]]
    assert data["Torch.split.0.forward"]["input_kwargs"]["dim"]["value"] == 1
    permute_back = data["Tensor.permute.0.backward"]
    assert permute_back["input"][0]["shape"] == [2, 3, 3, 2] and permute_back["output"][0]["shape"] == [2, 3, 3, 2]


def test_risk_level_core_dumps_the_core_apis_only(tmp_path):
    _, _, data = run(tmp_path, risk_level="CORE")
    assert sorted(data) == ["Functional.layer_norm.0.backward", "Functional.layer_norm.0.forward",
                            "Functional.linear.0.backward", "Functional.linear.0.forward"]


def test_a_list_or_scope_names_a_low_risk_api_whatever_the_risk_level(tmp_path):
    """The reference applies the risk level only when neither `list` nor `scope` selects."""
    _, _, data = run(tmp_path, list=["Tensor.permute.0.forward", "Functional.linear.0.forward"])
    assert sorted(data) == ["Functional.linear.0.forward", "Tensor.permute.0.forward"]


@pytest.mark.parametrize("risk", ["ALL", "CORE", "FOCUS"])
def test_training_is_bit_identical_at_every_risk_level(tmp_path, risk):
    loss, grads, _ = run(tmp_path / "off", dump=False)
    dumped_loss, dumped_grads, _ = run(tmp_path / risk, risk_level=risk)
    assert torch.equal(loss, dumped_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, dumped_grads))
