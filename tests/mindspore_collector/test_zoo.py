"""The MindSpore collector never breaks or changes training: every zoo model (ms_zoo.py beside this file) trains
with the debugger at L0, L1 and mix, with statistics, md5 and tensor tasks, bit-identically to the same training
without it (same process); its dump compares against itself with every row pass, builds a graph (L0/mix) and goes
through acc_check (L1).

These tests need mindspore, which needs numpy<2 and lives in its own environment (see .ci/run); elsewhere they are
skipped with the reason below."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import only_file, read_csv, run_cli

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                        "tests run in the separate environment of .ci/run)")

from msprobe.mindspore import PrecisionDebugger  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import ms_zoo  # noqa: E402

RUNS = [(name, level, task) for name in ms_zoo.MODELS for level in ("L0", "L1", "mix")
        for task in ("statistics", "md5", "tensor")]


@functools.lru_cache(maxsize=None)
def plain(name: str):
    return ms_zoo.train(name)


def debugger_for(root: Path, level: str, task: str) -> PrecisionDebugger:
    kwargs = {"task": "tensor"} if task == "tensor" else {"task": "statistics", "summary_mode": task}
    return PrecisionDebugger(dump_path=str(root), level=level, **kwargs)


def assert_same_training(expected, got) -> None:
    (losses, params), (dumped_losses, dumped_params) = expected, got
    assert all(np.array_equal(a, b) for a, b in zip(losses, dumped_losses, strict=True))
    assert list(params) == list(dumped_params)
    assert [k for k in params if not np.array_equal(params[k], dumped_params[k])] == []


def step_dir(root: Path, step: int = 0) -> Path:
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return proc


def assert_self_compare_passes(directory: Path, out: Path) -> int:
    dump = directory / "dump.json"
    assert run_cli(["compare", "-tp", dump, "-gp", dump, "-o", out, "--csv"]) == 0
    rows = read_csv(only_file(out, "compare_result_*.csv"))
    result = rows[0].index("Result")
    assert {row[result] for row in rows[1:]} == {"pass"}, [r for r in rows[1:] if r[result] != "pass"][:3]
    return len(rows) - 1


@pytest.mark.slow
@pytest.mark.parametrize("name, level, task", RUNS)
def test_zoo_model_trains_identically_and_its_dump_is_usable(tmp_path, name, level, task):
    expected = plain(name)
    got = ms_zoo.train(name, debugger_for(tmp_path / "dump", level, task))
    assert_same_training(expected, got)
    root = tmp_path / "dump"
    if (root / "graph").is_dir():       # @ms.jit cells at L0/mix: graph/ and pynative/ halves (docs/dump.md)
        assert sorted(p.name for p in root.iterdir()) == ["graph", "pynative"] and level != "L1"
        graph = root / "graph" / "step0" / "rank"
        assert_self_compare_passes(graph, tmp_path / "cmp_graph")
        root = root / "pynative"
    assert sorted(p.name for p in root.iterdir()) == ["step0", "step1"]
    directory = step_dir(root)
    dump = json.loads((directory / "dump.json").read_text())
    data = dump["data"]
    assert dump["framework"] == "mindspore" and dump["level"] == level
    assert data and not [n for n, body in data.items() if "dump_error" in body]
    if level in ("L0", "mix"):
        assert any(n.startswith("Cell.") and ".backward." in n for n in data)
        assert any(".parameters_grad." in n for n in data)
    if level in ("L1", "mix"):
        assert any(n.split(".")[0] in ("Mint", "MintFunctional", "Functional", "Tensor", "Primitive")
                   and n.endswith(".backward") for n in data)
    if task == "tensor":
        assert (directory / "dump_tensor_data").is_dir()
    rows = assert_self_compare_passes(directory, tmp_path / "cmp")
    assert rows > len(data)
    if level != "L1":           # a graph needs the cell structure of an L0/mix dump
        assert run_cli(["graph", "-tp", directory, "-o", tmp_path / "graph"]) == 0
        assert list((tmp_path / "graph").glob("*.vis*"))
    else:
        assert run_cli(["acc_check", "-api_info", directory / "dump.json", "-o", tmp_path / "acc"]) == 0
        results = read_csv(only_file(tmp_path / "acc", "accuracy_checking_result_*.csv"))
        assert len(results) > 1

