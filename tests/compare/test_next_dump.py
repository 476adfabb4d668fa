"""-da's next dump (issue 27): the collector configuration it writes beside its analysis, fed to our PyTorch collector on
the same model, dumps the real tensors of the culprit (and its module) only."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, only_file, run_cli

torch = pytest.importorskip("torch")

import culprits  # noqa: E402

from msprobe.compare.next_dump import module_prefix, selection  # noqa: E402
from msprobe.pytorch import PrecisionDebugger  # noqa: E402

pytestmark = pytest.mark.slow


def next_dump_config(tmp_path, name: str, level: str):
    target, golden = culprits.dump_pair(name, tmp_path / "stats", "statistics", level)
    out = tmp_path / "da"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-da"]) == 0
    path = only_file(out, "next_dump_*_target.json")
    analysis = json.loads(only_file(out, "diff_analyze_*.json").read_text())
    assert analysis["culprit"]["next_dump_config"] == str(path)
    golden = only_file(out, "next_dump_*_golden.json")
    assert analysis["culprit"]["next_dump_golden_config"] == str(golden)
    # one folder per run (issue 34: two runs into one folder overwrite each other's rank folders)
    config, golden_config = json.loads(path.read_text()), json.loads(golden.read_text())
    assert config["dump_path"] == str(out.resolve() / "next_dump" / "target")
    assert golden_config == dict(config, dump_path=str(out.resolve() / "next_dump" / "golden"))
    return config, path, analysis


@pytest.mark.parametrize("name, level", [("cnn", "mix"), ("lstm", "mix"), ("attention", "L1"), ("cnn", "L0")])
def test_the_next_dump_holds_the_culprit_only(name, level, tmp_path, monkeypatch):
    config, path, analysis = next_dump_config(tmp_path, name, level)
    culprit = culprits.CULPRITS[name]
    expected_api = culprit.module if level == "L0" else culprit.api
    assert analysis["culprit"]["op_name"] == expected_api
    # only the keys the collectors document (docs/dump.md), task tensor, the dump's own level and step
    assert set(config) == {"task", "dump_path", "rank", "step", "level", "async_dump", "tensor"}
    assert set(config["tensor"]) == {"scope", "list", "data_mode"}
    assert (config["task"], config["level"], config["step"], config["rank"]) == ("tensor", level, [0], [])
    head = culprit.api.rsplit(".", 1)[0]
    wanted = {"mix": [f"{head}.forward", f"{head}.backward", module_prefix(culprit.module)],
              "L1": [f"{head}.forward", f"{head}.backward"], "L0": [module_prefix(culprit.module)]}[level]
    assert config["tensor"]["list"] == wanted
    # the same model, dumped again with the file as it was written (into <-o>/next_dump/target)
    monkeypatch.chdir(tmp_path)
    culprits.train_step(name, True, PrecisionDebugger(config_path=str(path)))
    (folder,) = (tmp_path / "da" / "next_dump" / "target" / "step0").iterdir()
    entries = json.loads((folder / "dump.json").read_text())["data"]
    prefix = module_prefix(culprit.module)
    inside = {"mix": {culprit.api, culprit.api.replace(".forward", ".backward")}, "L1": {culprit.api,
              culprit.api.replace(".forward", ".backward")}, "L0": set()}[level]
    assert set(entries) - inside == {e for e in entries if e.startswith(prefix)}, sorted(entries)
    assert (culprit.module if level == "L0" else culprit.api) in entries
    files = {p.name for p in (folder / "dump_tensor_data").iterdir()}
    assert files and all(f.startswith(tuple(inside | {prefix})) for f in files)


def test_cross_framework_names_serve_both_runs(tmp_path):
    """A MindSpore target against its PyTorch twin, with one matmul's output made wrong: the list holds the culprit
    under both frameworks' names (Mint./Cell. for the MindSpore collector, Torch./Module. for the PyTorch one)."""
    for side in ("ms_mix", "pt_mix"):
        shutil.copytree(FIXTURES / "cross" / side, tmp_path / side)
    dump = tmp_path / "ms_mix" / "dump.json"
    data = json.loads(dump.read_text())
    data["data"]["Mint.matmul.0.forward"]["output"][0]["Max"] *= 3
    dump.write_text(json.dumps(data))
    out = tmp_path / "da"
    assert run_cli(["compare", "-tp", dump, "-gp", tmp_path / "pt_mix" / "dump.json", "-o", out, "-da", "-lm"]) == 0
    analysis = json.loads(only_file(out, "diff_analyze_*.json").read_text())
    assert analysis["culprit"]["op_name"] == "Mint.matmul.0.forward"
    assert analysis["culprit"]["golden_op_name"] == "Torch.matmul.0.forward"
    # each run gets its own framework's names only (a PyTorch run must not select the MindSpore counters)
    config = json.loads(only_file(out, "next_dump_*_target.json").read_text())
    assert config["tensor"]["list"] == ["Mint.matmul.0.forward", "Mint.matmul.0.backward", "Cell.layers.0.attn.Attention."]
    golden = json.loads(only_file(out, "next_dump_*_golden.json").read_text())
    assert golden["tensor"]["list"] == ["Torch.matmul.0.forward", "Torch.matmul.0.backward",
                                        "Module.layers.0.attn.Attention."]


def test_selection_of_each_kind_of_culprit():
    both = {"sides": [{"api": "Primitive.dense.Dense.6.backward", "module": "Cell.head.Linear.backward.0"},
                      {"api": "Functional.linear.8.backward", "module": "Module.lm_head.Linear.backward.0"}]}
    assert selection(both) == ["Primitive.dense.Dense.6.forward", "Primitive.dense.Dense.6.backward",
                               "Cell.head.Linear.", "Functional.linear.8.forward", "Functional.linear.8.backward",
                               "Module.lm_head.Linear."]
    assert selection({"sides": [{"api": None, "module": "Module.fc.Linear.parameters_grad.0"}]}) == ["Module.fc.Linear."]
    assert selection({"sides": [{"api": "Tensor.__mul__.2.forward", "module": None}]}) == [
        "Tensor.__mul__.2.forward", "Tensor.__mul__.2.backward"]


def test_no_culprit_no_config(tmp_path):
    """Twin runs of two frameworks: no row is made at its own op, so there is nothing to dump next."""
    cross = FIXTURES / "cross"
    assert run_cli(["compare", "-tp", cross / "ms_mix" / "dump.json", "-gp", cross / "pt_mix" / "dump.json",
                    "-o", tmp_path, "-da", "-lm"]) == 0
    analysis = json.loads(only_file(tmp_path, "diff_analyze_*.json").read_text())
    assert analysis["culprit"]["op_name"] is None and "next_dump_config" not in analysis["culprit"]
    assert not list(tmp_path.glob("next_dump_*.json"))


@pytest.mark.parametrize("parent", ["Cell", "Cell.", "Cell.forward.0", "Cell.layers.0.attn.Gone.forward.0", 7])
def test_a_parent_that_is_no_cell_entry_of_the_dump_selects_nothing_more(tmp_path, parent):
    """An adversarial construct.json whose parent of the culprit is not a cell call of the dump ("Cell" put `Cell.`
    into the list: every cell and API of the next dump at mix): the list holds the culprit's API alone on that
    side."""
    for side in ("ms_mix", "golden"):
        shutil.copytree(FIXTURES / "cross" / "ms_mix", tmp_path / side)
    dump = tmp_path / "ms_mix" / "dump.json"
    data = json.loads(dump.read_text())
    data["data"]["Mint.matmul.0.forward"]["output"][0]["Max"] *= 3
    dump.write_text(json.dumps(data))
    for construct_path in (tmp_path / "ms_mix" / "construct.json", tmp_path / "golden" / "construct.json"):
        construct = json.loads(construct_path.read_text())
        construct["Mint.matmul.0.forward"] = parent
        construct_path.write_text(json.dumps(construct))
    out = tmp_path / "da"
    assert run_cli(["compare", "-tp", dump, "-gp", tmp_path / "golden" / "dump.json", "-o", out, "-da"]) == 0
    for side in ("target", "golden"):
        config = json.loads(only_file(out, f"next_dump_*_{side}.json").read_text())
        assert config["tensor"]["list"] == ["Mint.matmul.0.forward", "Mint.matmul.0.backward"], side
