"""The PyTorch collector's API hooks (msprobe/pytorch/hooks.py) on what real architectures do (issue 34, tiny
Llama, GPT-2, ViT from transformers, reproduced here with hand-written modules): an API that returns its input
object gets no backward entry, `Tensor.type` is a cast (counted, not dumped), and `msprobe graph` of our own mix dump
does not warn about the APIs a collector never dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
F = torch.nn.functional

from msprobe.pytorch import PrecisionDebugger  # noqa: E402


class Attention(torch.nn.Module):
    """Llama's eager attention: softmax, then dropout with p=0 in training, which returns its input object; ViT's
    embeddings `add`, then dropout(p=0); GPT-2's `Tensor.type` to the same dtype and to another one."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(4, 4)

    def forward(self, x):
        scores = torch.softmax(self.q(x) @ x.transpose(-1, -2), dim=-1)
        weights = F.dropout(scores, p=0.0, training=True)
        same = weights.type(torch.float32)
        wide = same.type(torch.float64)
        return (wide.float() @ x) + F.dropout(x + 1.0, p=0.0, training=True)


def dump(tmp_path, level="mix"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(Attention())
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "dump"), level=level)
    x = torch.randn(2, 3, 4, requires_grad=True)
    with debugger.step_scope(model):
        model(x).sum().backward()
    (folder,) = (tmp_path / "dump" / "step0").iterdir()
    return folder, json.loads((folder / "dump.json").read_text())["data"]


def test_an_api_returning_its_input_object_has_no_backward_entry(tmp_path):
    """Llama's Functional.dropout.0.backward held softmax's gradients; ViT's two outputs of the embeddings add."""
    _, data = dump(tmp_path)
    assert "Functional.dropout.0.forward" in data and "Functional.dropout.1.forward" in data
    assert not [name for name in data if name.startswith("Functional.dropout.") and name.endswith(".backward")]
    softmax = data["Torch.softmax.0.backward"]                  # the op that made the tensor keeps its own
    assert softmax["input"][0]["shape"] == [2, 3, 3]


def test_tensor_type_is_a_cast_counted_but_not_dumped(tmp_path):
    """docs/dump.md: casts are not dumped; `Tensor.type` (GPT-2: 4 entries) was, to the same dtype or another."""
    folder, data = dump(tmp_path)
    assert not [name for name in data if name.startswith("Tensor.type.")]
    construct = json.loads((folder / "construct.json").read_text())
    assert {"Tensor.type.0.forward", "Tensor.type.1.forward"} <= set(construct)


def test_graph_of_our_own_dump_does_not_warn_about_what_collectors_never_dump(tmp_path, capsys):
    folder, _ = dump(tmp_path)
    assert run_cli(["graph", "-tp", folder, "-o", tmp_path / "graph"]) == 0
    printed = capsys.readouterr()
    assert "have no dump.json entry" not in printed.out + printed.err
    assert list(Path(tmp_path / "graph").glob("*.vis*"))
