"""Mixed precision in MindSpore's static graph (docs/dump.md, "Mixed precision"): every amp configuration
(ms.amp.auto_mixed_precision O0-O3, build_train_network, custom_mixed_precision, Cell.to_float(float16) on a conv,
a Dense, a whole block, a BatchNorm) is collected in GRAPH_MODE and under an @ms.jit cell in PyNative at L0, mix and
L1, with the statistics, md5 and tensor tasks, and trains bit-identically with the debugger on. A CNN with BatchNorm
is the full matrix (each level of each configuration in both modes; the task turns with the level), a transformer
block and an LSTM a part of it. Where an oracle is asked for, the L0 entry names are those PyNative gives the same
model.

Each test is one process (amp_zoo.py: MindSpore compiles from source files; a graph compiles in a second or two), a
few cases per process. Before the fix, a GRAPH_MODE model with one to_float cell failed to compile at L0 ("For
primitive[Conv2D], the input type must be same ... name:[w]:Ref[Tensor[Float32]] ... name:[x]:Tensor[Float16]")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                        "tests run in the separate environment of .ci/run)")

HERE = Path(__file__).parent
TASKS = ("statistics", "md5", "tensor")
CNN_AMPS = ("O0", "O1", "O2", "O3", "build-O2", "build-O3", "custom-white", "custom-black", "to_float-stem",
            "to_float-head", "to_float-block", "to_float-bn")
REWRITTEN = {"O1", "custom-white"}     # ms.amp rewrites the cells: they cast inside, their own values are float32
ORACLES = {"O1", "O2", "build-O3", "custom-white", "to_float-block", "to_float-attn.qkv", "to_float-rnn"}
# the path of a cell of each model whose forward and backward entries every L0/mix dump holds
WATCHED = {"cnn": "stem", "transformer": "attn.qkv", "lstm": "rnn"}


def case(model: str, mode: str, amp: str, levels: tuple, turn: int) -> dict:
    return {"model": model, "mode": mode, "amp": amp, "oracle": amp in ORACLES,
            "runs": [[level, TASKS[(turn + i) % len(TASKS)]] for i, level in enumerate(levels)]}


def matrix() -> list:
    cases = []
    for turn, amp in enumerate(CNN_AMPS):
        cases.append(case("cnn", "graph", amp, ("L0", "mix", "L1"), turn))
        # under @ms.jit, L1 records the jit cell as one Jit entry whatever the amp: three configurations suffice
        cases.append(case("cnn", "jit", amp, ("L0", "mix", "L1") if turn % 4 == 0 else ("L0", "mix"), turn + 1))
    groups = [cases[i:i + 3] for i in range(0, len(cases), 3)]
    # the other models, a case or two a process (a transformer compiles slowly): amp's rewrite of an attention
    # block in GRAPH_MODE, a Dense inside attention and a whole LSTM given to_float, level O2 around an LSTM
    groups.append([case("transformer", "graph", "O1", ("L0", "mix"), 0)])
    groups.append([case("transformer", "jit", "to_float-attn.qkv", ("L0", "mix"), 1)])
    groups.append([case("lstm", "graph", "to_float-rnn", ("L0", "mix"), 2),
                   case("lstm", "jit", "O2", ("L0", "mix"), 0)])
    return groups


GROUPS = matrix()


def label(group: list) -> str:
    return "+".join(f"{c['model']}-{c['mode']}-{c['amp']}" for c in group)


def without_parameters(names) -> list:
    return [n for n in names if ".parameters_grad." not in n]


def same_classes(name: str) -> str:
    """`Conv2dOpt_3` -> `Conv2dOpt`: the class names of two rewrites of one network by ms.amp differ in the
    number."""
    return re.sub(r"(Opt)_\d+\.", r"\1.", name)


def calls_of(names, path: str, direction: str) -> list:
    """The entries `Cell.<...>.<path>.<Class>.<direction>.0` (amp's wrappers add parts before the path, its
    rewrite renames the class)."""
    ending = f".{direction}.0"
    return [n for n in names if n.endswith(ending) and n[:-len(ending)].rsplit(".", 1)[0].endswith(f".{path}")]


def check(result: dict) -> None:
    spec = result["case"]
    what = f"{spec['model']} {spec['mode']} {spec['amp']}"
    assert "error" not in result, f"{what}:\n{result.get('error')}"
    graph = spec["mode"] == "graph"
    amp = spec["amp"]
    for run in result["runs"]:
        where = f"{what} {run['level']} {run['task']}"
        assert run["same_losses"] and run["same_params"], f"{where}: training changed by the debugger"
        dumps = run["dumps"]
        # one folder per recorded step, the PyNative layout for jit cells (no graph/ and pynative/ halves)
        assert [d["folder"].split(os.sep)[0] for d in dumps] == ["step0", "step1"], where
        assert all(d["folder"].split(os.sep)[1] == "rank" if graph else d["folder"].split(os.sep)[1].startswith(
            "proc") for d in dumps), where
        names = dumps[0]["names"]
        assert dumps[1]["names"] == names, where
        if run["level"] == "L1" and graph and amp in REWRITTEN:
            # the rewrite inlined every API call of the model into its own copies: an empty step that says why
            assert not names and all("rewritten by ms.amp" in (d["incomplete"] or "") for d in dumps), where
            continue
        assert all(d["incomplete"] is None for d in dumps), where
        if run["level"] == "L1":
            assert not any(n.startswith("Cell.") for n in names), where
            assert ("Functional.relu.0.forward" in names) if graph else ("Jit.Wrap.0.forward" in names), where
            continue
        watched = WATCHED[spec["model"]]
        for direction in ("forward", "backward"):
            assert calls_of(names, watched, direction), f"{where}: no {watched} {direction}.0"
        dtypes = dumps[0]["dtypes"]
        half = {n for n, found in dtypes.items() if "Float16" in found}
        if amp == "O0":
            assert not half, where
        elif amp not in REWRITTEN:
            assert half, f"{where}: no float16 value recorded"
        if amp.startswith("to_float-"):
            # the cell at that path of the model (not a deeper one of the same name: block.bn, rnn.rnn)
            entry = min(calls_of(names, amp[len("to_float-"):], "forward"), key=len)
            assert "Float16" in dtypes[entry], f"{where}: {entry} {dtypes[entry]}"
        if run["level"] == "L0":
            assert all(n.startswith("Cell.") for n in names), where
        if graph and run["level"] == "mix" and spec["model"] == "cnn" and amp not in REWRITTEN:
            # (a rewrite by ms.amp inlines ops.relu into its own copy, relu_opt: no API call left, as in PyNative)
            assert "Functional.relu.0.forward" in names, where
        if run["level"] == "L0" and "oracle" in result:
            # numbered as PyNative numbers the same model; the graph records no parameters_grad, nor a cell whose
            # arguments are a tuple (the optimizer's gradients); each rewrite by ms.amp numbers its classes anew
            names = [same_classes(n) for n in names]
            oracle = [same_classes(n) for n in without_parameters(result["oracle"][0]["names"])
                      if graph is False or not n.startswith("Cell.optimizer.")]
            assert sorted(names) == sorted(oracle), f"{where}: {set(names) ^ set(oracle)}"
            forward = [n for n in names if ".forward." in n]
            assert forward == [n for n in oracle if ".forward." in n], where


# the groups CI runs: every configuration family once (O0/O1, to_float on a cell, an attention network rewritten by
# O1); the rest of the matrix (custom lists, build_train_network, O2/O3, the LSTM) is `extended` (`-m extended`)
IN_CI = {"cnn-graph-O0+cnn-jit-O0+cnn-graph-O1", "cnn-graph-to_float-head+cnn-jit-to_float-head+cnn-graph-to_float-block",
         "transformer-graph-O1"}


@pytest.mark.slow
@pytest.mark.parametrize("group", [pytest.param(g, marks=() if label(g) in IN_CI else pytest.mark.extended)
                                   for g in GROUPS], ids=[label(g) for g in GROUPS])
def test_mixed_precision_collects_bit_identically(tmp_path, group):
    done = subprocess.run([sys.executable, str(HERE / "amp_zoo.py"), json.dumps(group), str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, GLOG_v="3"))
    results = [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("AMP ")]
    assert len(results) == len(group), f"rc {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    for result in results:
        check(result)
