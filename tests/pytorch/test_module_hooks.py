"""Module backward slots (msprobe/pytorch/module_hooks.py): `input` slot k holds the gradient that came to the k-th
returned output from outside the module, `null` where none came, even when the module itself uses that output inside
(an eager attention's weights, a BertModel's hidden state fed to its pooler) or returns one of its inputs. Values are
checked against gradients worked out by hand and against autograd in the same process."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from msprobe.pytorch import PrecisionDebugger  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from zoo import Pooled, Weighted  # noqa: E402  (an eager attention returning its weights; a BertModel-like body)


class Caller(nn.Module):
    def __init__(self, loss, reentrant=None):
        super().__init__()
        self.att = Weighted()
        self.loss = loss
        self.reentrant = reentrant

    def forward(self, x):
        if self.reentrant is None:
            return self.loss(*self.att(x))
        return self.loss(*checkpoint(self.att, x, use_reentrant=self.reentrant))


def record(tmp_path: Path, model: nn.Module, make_input, loss=None):
    """Train one step of `model` with the debugger (L0, tensor task) and once without it from the same state: the
    dump's entries, a loader of its saved tensors, and the input's gradient of the plain run."""
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    x = make_input()
    (loss or model)(x).backward()
    expected = x.grad.clone()
    model.load_state_dict(initial)
    model.zero_grad()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L0", task="tensor", model=model)
    x = make_input()
    debugger.start()
    (loss or model)(x).backward()
    debugger.stop()
    assert torch.equal(x.grad, expected)                    # training is untouched
    (proc,) = (tmp_path / "d" / "step0").iterdir()
    data = json.loads((proc / "dump.json").read_text())["data"]

    def saved(name):
        return torch.load(proc / "dump_tensor_data" / f"{name}.pt", weights_only=True)
    return data, saved, expected


def leaf():
    return torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1)).requires_grad_()


def full(value, *shape):
    return torch.full(shape or (2, 3, 8), value)


def test_an_output_used_inside_and_dropped_by_the_caller_has_a_null_slot(tmp_path):
    torch.manual_seed(0)
    model = Caller(lambda out, _weights: (out * 2).sum())
    data, saved, x_grad = record(tmp_path, model, leaf)
    entry = data["Module.att.Weighted.backward.0"]
    assert entry["input"][1] is None                 # the weights got gradient only from inside the module
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.0"), full(2.0))
    assert torch.equal(saved("Module.att.Weighted.backward.0.output.0"), x_grad)


def test_outputs_used_inside_and_by_the_caller_hold_the_callers_gradient(tmp_path):
    """The weights used three times by the caller, once through a view: the slot is the sum of those uses only."""
    torch.manual_seed(0)
    model = Caller(lambda out, weights: out.sum() + (weights * 3).sum() + weights[0].sum())
    data, saved, x_grad = record(tmp_path, model, leaf)
    weights_grad = full(3.0, 2, 3, 3)
    weights_grad[0] = 4.0
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.0"), full(1.0))
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.1"), weights_grad)
    assert torch.equal(saved("Module.att.Weighted.backward.0.output.0"), x_grad)


@pytest.mark.parametrize("reentrant", [False, True])
def test_under_activation_checkpointing_a_dropped_output_stays_null(tmp_path, reentrant):
    torch.manual_seed(0)
    model = Caller(lambda out, _weights: (out * 2).sum(), reentrant=reentrant)
    data, saved, x_grad = record(tmp_path, model, leaf)
    entries = [name for name in data if name.startswith("Module.att.Weighted.backward.")]
    assert len(entries) == 1
    if reentrant:       # the reentrant checkpoint's backward passes zeros for an unused output: what came from outside
        assert torch.equal(saved(f"{entries[0]}.input.1"), full(0.0, 2, 3, 3))
    else:
        assert data[entries[0]]["input"][1] is None
    assert torch.equal(saved(f"{entries[0]}.input.0"), full(2.0))
    assert torch.equal(saved(f"{entries[0]}.output.0"), x_grad)


def test_a_module_called_twice_gets_each_calls_own_slots(tmp_path):
    torch.manual_seed(0)
    model = Caller(lambda out, weights: out.sum())
    model.forward = lambda x: (model.att(x)[0] * 2).sum() + (model.att(x)[1] * 5).sum()
    data, saved, _ = record(tmp_path, model, leaf)
    first, second = data["Module.att.Weighted.backward.0"], data["Module.att.Weighted.backward.1"]
    assert first["input"][1] is None and second["input"][0] is None
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.0"), full(2.0))
    assert torch.equal(saved("Module.att.Weighted.backward.1.input.1"), full(5.0, 2, 3, 3))


def test_an_output_modified_in_place_by_the_caller_and_an_input_returned_as_it_is(tmp_path):
    torch.manual_seed(0)
    model = Pooled()

    def loss(x):
        x = x * 1.0                                       # a non-leaf input, also used before the call
        before = (x * 7).sum()
        hidden, pooled, same = model(x)
        hidden.add_(1.0)
        return before + (hidden * 2).sum() + pooled.sum() + (same * 5).sum()

    _, saved, x_grad = record(tmp_path, Wrapper(model, loss), leaf)
    name = "Module.body.Pooled.backward.0"
    assert torch.equal(saved(f"{name}.input.0"), full(2.0))
    assert torch.equal(saved(f"{name}.input.1"), full(1.0, 2, 8))
    assert torch.equal(saved(f"{name}.input.2"), full(5.0))     # only the returned object's uses
    # the input's gradient through the module: its inner uses (hidden, and the pooler through the mean) plus the
    # uses of the object it returned; not the caller's own use of x before the call (7)
    with torch.no_grad():
        pooled = model(leaf())[1]
        hidden_grad = 2.0 + (1 - pooled**2) @ model.pool.weight / 3                  # [2, 8], the same for each row
        through = (1.5 * hidden_grad @ model.layer.weight)[:, None, :] + 5.0
    assert torch.allclose(saved(f"{name}.output.0"), through.expand(2, 3, 8), rtol=1e-5, atol=1e-6)
    assert torch.allclose(x_grad, through.expand(2, 3, 8) + 7.0, rtol=1e-5, atol=1e-6)


class Wrapper(nn.Module):
    def __init__(self, body, loss):
        super().__init__()
        self.body = body
        self.loss = loss

    def forward(self, x):
        return self.loss(x)


def test_a_module_returning_its_input_gets_the_gradient_of_the_returned_object_only(tmp_path):
    model = nn.Sequential(nn.Identity())

    def loss(x):
        x = x * 1.0
        return (x * 7).sum() + (model(x) * 4).sum()

    data, saved, _ = record(tmp_path, model, leaf, loss=loss)
    assert torch.equal(saved("Module.0.Identity.backward.0.input.0"), full(4.0))
    assert torch.equal(saved("Module.0.Identity.backward.0.output.0"), full(4.0))


def test_a_view_output_modified_in_place_by_the_next_module_keeps_its_entry(tmp_path):
    """A 3-d Linear's output is a view of its 2-d result: ReLU(inplace=True) on it gives the result a CopySlices node
    and leaves the view's own node unused. The Linear's entry is still written, with the gradient of its output."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    data, saved, x_grad = record(tmp_path, net, leaf, loss=lambda x: net(x).sum())
    relu_in, relu_out = saved("Module.1.ReLU.backward.0.input.0"), saved("Module.1.ReLU.backward.0.output.0")
    assert torch.equal(relu_in, saved("Module.2.Linear.backward.0.output.0"))
    assert torch.allclose(relu_in, net[2].weight.detach().sum(0).expand(2, 3, 8), rtol=1e-6, atol=1e-6)
    assert torch.equal(relu_out, relu_in * (saved("Module.1.ReLU.forward.0.output.0") > 0))
    assert torch.equal(saved("Module.0.Linear.backward.0.input.0"), relu_out)
    assert torch.equal(saved("Module.0.Linear.backward.0.output.0"), x_grad)
    assert [n for n in data if ".backward." in n] == ["Module.2.Linear.backward.0", "Module.1.ReLU.backward.0",
                                                      "Module.0.Linear.backward.0"]


class Part(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)[..., :2]              # a view of part of a tensor the caller never sees


class PooledView(Pooled):
    def forward(self, x):
        hidden = self.layer(x)                    # a view: a 3-d Linear's output
        return hidden, torch.tanh(self.pool(hidden.mean(1))), x


def test_view_outputs_modified_in_place_by_the_caller(tmp_path):
    part, body = Part(), PooledView()

    def loss(x):
        y = part(x)
        y.mul_(3.0)
        hidden, pooled, _ = body(x)
        hidden.add_(1.0)
        return (y * 2).sum() + (hidden * 2).sum() + pooled.sum()

    torch.manual_seed(0)
    model = nn.ModuleDict({"part": part, "body": body})
    data, saved, _ = record(tmp_path, Wrapper(model, loss), leaf)
    assert torch.equal(saved("Module.body.part.Part.backward.0.input.0"), full(6.0, 2, 3, 2))
    assert torch.equal(saved("Module.body.body.PooledView.backward.0.input.0"), full(2.0))   # not the pooler's
    with torch.no_grad():
        pooled = body(leaf())[1]
        layer_grad = (2.0 + (1 - pooled**2) @ body.pool.weight / 3)[:, None, :].expand(2, 3, 8)
    assert torch.allclose(saved("Module.body.body.layer.Linear.backward.0.input.0"), layer_grad, rtol=1e-5,
                          atol=1e-6)


def test_uses_made_in_another_thread_count(tmp_path):
    """Autograd numbers nodes per thread: the uses of the outputs made in another thread are found all the same."""
    torch.manual_seed(0)
    model = Caller(lambda out, weights: out.sum())

    def loss(x):
        out, weights = model.att(x)
        made = []
        worker = threading.Thread(target=lambda: made.append(out.sum() + (weights * 3).sum()))
        worker.start()
        worker.join()
        return made[0]

    _, saved, _ = record(tmp_path, model, leaf, loss=loss)
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.0"), full(1.0))
    assert torch.equal(saved("Module.att.Weighted.backward.0.input.1"), full(3.0, 2, 3, 3))
