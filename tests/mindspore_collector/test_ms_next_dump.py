"""-da's next dump fed to the MindSpore collector (issue 27): a MindSpore model whose one API call is wrong in the
target run; `msprobe compare -da` names it, and the collector configuration it writes, given to our MindSpore
collector on the same model, dumps the real tensors of that call and of the cell holding it only.

These tests need mindspore (numpy<2, the separate environment of .ci/run); elsewhere they are skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import only_file, run_cli

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import mint  # noqa: E402

from msprobe.mindspore import PrecisionDebugger  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import ms_zoo  # noqa: E402

CULPRIT = "MintFunctional.relu.0"                 # called inside Cell.pair.PairOut (ms_zoo.Outputs)
MODULE = "Cell.pair.PairOut."


@pytest.fixture
def faulty_relu(monkeypatch):
    """mint.nn.functional.relu whose kernel is 1 % off: the collector records it as MintFunctional.relu with the
    inputs of the real call (the scaling inside is the call's own work, not recorded)."""
    original = mint.nn.functional.relu

    def apply():
        monkeypatch.setattr(mint.nn.functional, "relu", lambda x, *a, **k: original(x, *a, **k) * 1.01)
    return apply


def test_the_next_dump_of_a_mindspore_culprit_holds_it_only(tmp_path, monkeypatch, faulty_relu):
    ms_zoo.train("outputs", PrecisionDebugger(dump_path=str(tmp_path / "golden"), level="mix"), steps=1)
    faulty_relu()
    ms_zoo.train("outputs", PrecisionDebugger(dump_path=str(tmp_path / "target"), level="mix"), steps=1)
    out = tmp_path / "da"
    assert run_cli(["compare", "-tp", tmp_path / "target" / "step0", "-gp", tmp_path / "golden" / "step0",
                    "-o", out, "-da"]) == 0
    analysis = json.loads(only_file(out, "diff_analyze_*.json").read_text())
    assert analysis["culprit"]["op_name"] == f"{CULPRIT}.forward"
    config = json.loads(Path(analysis["culprit"]["next_dump_config"]).read_text())
    assert config["dump_path"] == str((out / "next_dump" / "target").resolve())
    config["dump_path"] = "./next_dump"
    assert config["level"] == "mix" and config["task"] == "tensor"
    assert config["tensor"]["list"] == [f"{CULPRIT}.forward", f"{CULPRIT}.backward", MODULE]
    # the same (faulty) model dumped again with that file, as written (dump_path ./next_dump)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "next_dump.json"
    path.write_text(json.dumps(config))
    ms_zoo.train("outputs", PrecisionDebugger(config_path=str(path)), steps=1)
    (folder,) = (tmp_path / "next_dump" / "step0").iterdir()
    entries = json.loads((folder / "dump.json").read_text())["data"]
    assert f"{CULPRIT}.forward" in entries and f"{CULPRIT}.backward" in entries
    # the listed cell and, at mix, what is called inside it (its sub-cells Cell.pair.a/b and their APIs); nothing
    # from outside it (Cell.dict, the loss APIs)
    construct = json.loads((folder / "construct.json").read_text())

    def inside(entry):
        while entry is not None:
            if entry.startswith(MODULE):
                return True
            entry = construct.get(entry)
        return False
    assert any(e.startswith(MODULE) for e in entries)
    assert [e for e in entries if not inside(e) and not e.startswith("Cell.pair.")] == []
    files = [p.name for p in (folder / "dump_tensor_data").iterdir()]
    assert files and all(f.endswith(".npy") for f in files)
