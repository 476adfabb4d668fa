"""Activation recomputation (spec §4.2 step 4): a real dump of a model using torch.utils.checkpoint, made with our
PrecisionDebugger; the recomputed module calls move under the backward of the layer they repeat."""

from __future__ import annotations

import json

import pytest

from msprobe.graph.tree import is_recompute

from conftest import only_file, run_cli

torch = pytest.importorskip("torch", reason="torch is needed to make the checkpointed dump")


def _dump(path):
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    from msprobe.pytorch import PrecisionDebugger, seed_all

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return torch.relu(self.fc(x)) + x

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False)
            return x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stack = Stack()
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            return self.head(self.stack(x))

    seed_all(0)
    net = Net()
    debugger = PrecisionDebugger(task="statistics", level="mix", dump_path=str(path))
    debugger.start(net)
    net(torch.randn(4, 8)).sum().backward()
    debugger.stop()
    debugger.step()
    return only_file(path / "step0", "proc*")


def test_recomputed_calls_move_under_the_backward(tmp_path):
    dump = _dump(tmp_path / "dump")
    construct = json.loads((dump / "construct.json").read_text())
    recomputed = "Module.stack.blocks.1.Block.forward.1"
    assert construct[recomputed] is None        # the dump puts the recomputation at the top
    # torch stops the recomputation once backward has what it needs: the outer call never finishes; it is recorded
    # with output [null] as the reference records it, and the stacks show the recomputation
    stacks = json.loads((dump / "stack.json").read_text())
    assert json.loads((dump / "dump.json").read_text())["data"][recomputed]["output"] == [None]
    assert is_recompute(next(v[1] for v in stacks.values() if recomputed in v[0]))
    lines = next(v[1] for v in stacks.values() if "Module.stack.blocks.1.fc.Linear.forward.1" in v[0])
    assert is_recompute(lines)
    assert run_cli(["graph", "-tp", dump, "-o", tmp_path / "out"]) == 0
    nodes = json.loads(only_file(tmp_path / "out", "build_*.vis").read_text())["node"]
    for index in (0, 1):
        name = f"Module.stack.blocks.{index}.Block.forward.1"
        assert nodes[name]["upnode"] == "Module.stack.Stack.backward.0", name
        assert name in nodes["Module.stack.Stack.backward.0"]["subnodes"]
        assert name not in nodes["DefaultModel"]["subnodes"]
        # its own children stay with it
        assert nodes[f"Module.stack.blocks.{index}.fc.Linear.forward.1"]["upnode"] == name
    # the first call is untouched, and no micro step is opened by a recomputation
    assert nodes["Module.stack.blocks.0.Block.forward.0"]["upnode"] == "Module.stack.Stack.forward.0"
    assert {node.get("micro_step_id", 0) for node in nodes.values()} == {0}


def test_is_recompute_needs_a_recomputation_frame():
    plain = ["File model.py, line 3, in forward, \n return self.fc(x)"]
    assert not is_recompute(plain) and not is_recompute(None)
    megatron = ["File megatron/core/tensor_parallel/random.py, line 250, in backward, \n outputs = ctx.run_function(*x)",
                "File /usr/lib/python3/site-packages/torch/autograd/function.py, line 307, in apply, \n return f()"]
    assert is_recompute(megatron)
