"""The MindSpore collector's cell hooks and call counters (msprobe/mindspore/cells.py, collector.py): a cell that
raises is closed and its entry says so, every call of a recursive cell keeps its own number from its pre-hook to its
post-hook, threads never share a number, and a `list` of full names selects those entries only (issue 34).

These tests need mindspore (numpy<2, the separate environment of .ci/run); elsewhere they are skipped."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import Tensor, mint, nn, ops  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402


def step_files(root: Path) -> tuple[dict, dict]:
    (proc,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    dump = json.loads((proc / "dump.json").read_text())["data"]
    construct_path = proc / "construct.json"
    return dump, (json.loads(construct_path.read_text()) if construct_path.exists() else {})


def train_once(net, debugger, *inputs):
    def forward(*args):
        return net(*args).sum()
    grad = ms.value_and_grad(forward, None, net.trainable_params())
    debugger.start(net)
    try:
        loss, _ = grad(*inputs)
    finally:
        debugger.stop()
        debugger.step()
    return loss


class Fails(nn.Cell):
    def construct(self, x):
        raise ValueError("no\x1b[31m way")


class CatchesASubCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.bad = Fails()
        self.fc = nn.Dense(3, 3)

    def construct(self, x):
        try:
            x = self.bad(x)
        except ValueError:
            pass
        return ops.relu(self.fc(x))


def test_a_sub_cell_that_raises_is_closed_and_its_entry_names_the_exception(tmp_path):
    """The model catches a sub-cell's exception: the cell used to stay open, the parent of every later cell and API
    of the step in construct.json."""
    train_once(CatchesASubCell(), PrecisionDebugger(dump_path=str(tmp_path), level="mix"),
               Tensor(np.ones((2, 3), np.float32)))
    dump, construct = step_files(tmp_path)
    bad = "Cell.bad.Fails.forward.0"
    assert dump[bad]["dump_error"] == "the call raised ValueError: no\x1b[31m way"
    assert "output" not in dump[bad] and len(dump[bad]["input_args"]) == 1
    assert construct[bad] is None
    assert construct["Cell.fc.Dense.forward.0"] is None
    relu = [name for name in dump if name.startswith("Functional.relu.") and name.endswith(".forward")]
    assert relu and all(construct[name] is None for name in relu)
    assert bad not in construct.values()


class Rec(nn.Cell):
    """Calls itself once: the outer call's post-hook used to read the inner call's number."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3, weight_init="ones", bias_init="zeros")

    def construct(self, x, depth=1):
        if depth:
            x = self(x, 0)
        return self.fc(x) * 2.0


class Holder(nn.Cell):
    def __init__(self):
        super().__init__()
        self.r = Rec()

    def construct(self, x):
        return self.r(x)


def test_each_call_of_a_recursive_cell_keeps_its_number(tmp_path):
    train_once(Holder(), PrecisionDebugger(dump_path=str(tmp_path), level="L0"), Tensor(np.ones((2, 3), np.float32)))
    dump, construct = step_files(tmp_path)
    for direction in ("forward", "backward"):
        for index in (0, 1):
            name = f"Cell.r.Rec.{direction}.{index}"
            assert name in dump, sorted(dump)
            assert dump[name].get("output") or dump[name].get("input"), (name, dump[name])
    # the outer call (0) returns fc(inner) * 2 = 36 everywhere, the inner one (1), called inside it, fc(x) * 2 = 6
    assert construct["Cell.r.Rec.forward.1"] == "Cell.r.Rec.forward.0"
    outer, inner = dump["Cell.r.Rec.forward.0"]["output"][0], dump["Cell.r.Rec.forward.1"]["output"][0]
    assert (outer["shape"], outer["Min"], outer["Max"]) == ([2, 3], 36.0, 36.0)
    assert (inner["shape"], inner["Min"], inner["Max"]) == ([2, 3], 6.0, 6.0)


class SlowCounts(dict):
    """The call counters, with a thread switch where reading a number meets writing the next one: what 8 threads
    x 1,500 mint.add calls met by chance (7 duplicate keys in dump.json, calls lost) happens on every call."""

    def get(self, key, default=None):
        value = super().get(key, default)
        time.sleep(0.0005)
        return value


def test_threads_calling_at_once_never_share_a_number(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1", data_mode=["input"])
    x = Tensor(np.ones((2,), np.float32))
    threads, calls = 8, 15

    def work():
        for _ in range(calls):
            mint.add(x, x)
    debugger.start()
    debugger.collector.api_counts = SlowCounts()
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        debugger.stop()
        debugger.step()
    (proc,) = [p for p in (tmp_path / "step0").iterdir() if p.is_dir()]
    pairs = json.loads((proc / "dump.json").read_text(), object_pairs_hook=lambda items: items)
    data = dict(pairs)["data"]
    names = [name for name, _ in data if name.startswith("Mint.add.")]
    assert len(names) == len(set(names)) == threads * calls
    assert set(names) == {f"Mint.add.{i}.forward" for i in range(threads * calls)}


class TwoSilus(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 3)

    def construct(self, x):
        return mint.nn.functional.silu(ops.silu(self.fc(x)))


def test_a_full_name_in_list_selects_that_entry_only(tmp_path):
    """`Functional.silu.0.forward` (ops.silu) also selected `MintFunctional.silu.0.forward`, a different API."""
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix", task="tensor",
                                 list=["Functional.silu.0.forward", "Functional.silu.0.backward"])
    train_once(TwoSilus(), debugger, Tensor(np.ones((2, 3), np.float32)))
    dump, _ = step_files(tmp_path)
    assert sorted(dump) == ["Functional.silu.0.backward", "Functional.silu.0.forward"]
