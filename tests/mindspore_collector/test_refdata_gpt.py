"""Acceptance against the reference: the refdata script ms_gpt.py (tests/fixtures/ms_gpt, unchanged), run with our
collector, gives the reference's dumps (mindstudio-probe 26.2.0, same script, same machine type) entry for entry:
the same entry names in the same order at L0, L1 and mix for both steps (plus our Jit.* entries), every tensor
statistic within 1e-5 of the tensor's scale, the same construct.json, the same stack groups of forward entries,
and every matched row of our compare of the two dumps passes. The md5 and tensor tasks write dumps whose records
agree with statistics recomputed from the saved .npy files.

Step 0 of the reference's dumps is tests/fixtures/cross/ms_{L0,L1,mix}; step 1 is tests/fixtures/ms_gpt/step1_*."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, only_file, read_csv, run_cli

pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                        "tests run in the separate environment of .ci/run)")

SCRIPTS = FIXTURES / "ms_gpt"
LEVELS = ("L0", "L1", "mix")
RUNS = [("statistics", level) for level in LEVELS] + [("md5", "mix"), ("tensor", "mix")]

# Runs ms_gpt.py's main() once per configuration in one process (MindSpore is imported once).
DRIVER = """
import runpy, sys
script, out = sys.argv[1], sys.argv[2]
for spec in sys.argv[3:]:
    task, level = spec.split(":")
    sys.argv = [script, "--task", task, "--level", level, "--out", f"{out}/{task}_{level}"]
    runpy.run_path(script, run_name="__main__")
"""


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ms_gpt")
    work = out / "scripts"
    work.mkdir()
    for name in ("ms_gpt.py", "common_init.py"):
        (work / name).write_bytes((SCRIPTS / name).read_bytes())
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(work / "ms_gpt.py"), str(out),
                           *[f"{task}:{level}" for task, level in RUNS]], capture_output=True, text=True, cwd=work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    losses = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    # the reference's training (refdata README): the same losses with any collector
    assert losses == ["step 0 loss 3.475240", "step 1 loss 3.467316"] * len(RUNS)
    return out


def ours(dumps: Path, task: str, level: str, step: int) -> Path:
    (proc,) = (dumps / f"{task}_{level}" / f"step{step}").iterdir()
    return proc


def reference(level: str, step: int) -> Path:
    return FIXTURES / "cross" / f"ms_{level}" if step == 0 else SCRIPTS / f"step1_{level}"


def load(directory: Path, name: str) -> dict:
    return json.loads((directory / name).read_text())


def tensor_leaves(value, path=""):
    """(path, record) of every tensor record of an entry."""
    if isinstance(value, dict) and value.get("type") == "mindspore.Tensor":
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensor_leaves(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from tensor_leaves(item, f"{path}.{index}")


def without_jit(data: dict) -> dict:
    return {k: v for k, v in data.items() if not k.startswith("Jit.")}


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("step", (0, 1))
def test_entries_statistics_construct_and_stacks_are_the_references(dumps, level, step):
    mine, theirs = ours(dumps, "statistics", level, step), reference(level, step)
    data, expected = load(mine, "dump.json")["data"], load(theirs, "dump.json")["data"]
    jit = [name for name in data if name.startswith("Jit.")]
    assert list(without_jit(data)) == list(expected)                 # names, in order
    if level != "L0":
        assert jit == ["Jit.SGD.0.forward"]                           # the optimizer's graph (nn.SGD is jit)
    for name, body in expected.items():
        got = dict(tensor_leaves(data[name]))
        want = dict(tensor_leaves(body))
        assert list(got) == list(want), name
        for path, record in want.items():
            mine_record = got[path]
            assert (mine_record["dtype"], mine_record["shape"]) == (record["dtype"], record["shape"]), (name, path)
            scale = max(abs(record["Max"]), abs(record["Min"])) if isinstance(record["Max"], (int, float)) \
                and not isinstance(record["Max"], bool) else 0
            for key in ("Max", "Min", "Mean", "Norm"):
                a, b = mine_record[key], record[key]
                if isinstance(b, bool) or b is None:
                    assert a == b, (name, path, key)
                else:
                    assert math.isclose(a, b, rel_tol=0, abs_tol=1e-5 * (abs(b) if key == "Norm" else scale)), \
                        (name, path, key, a, b)
    construct = load(mine, "construct.json")
    assert {k: v for k, v in construct.items() if not k.startswith("Jit.")} == load(theirs, "construct.json")
    assert all(construct[name] is None for name in jit if level == "mix")

    def groups(stack):
        return sorted(sorted(n for n in names if not n.startswith("Jit.")) for names, _ in stack.values())
    assert [g for g in groups(load(mine, "stack.json")) if g] == groups(load(theirs, "stack.json"))


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_our_compare_of_our_dump_against_the_references_passes(dumps, tmp_path, level):
    mine = ours(dumps, "statistics", level, 0) / "dump.json"
    assert run_cli(["compare", "-tp", mine, "-gp", reference(level, 0) / "dump.json", "-o", tmp_path,
                    "--csv"]) == 0
    rows = read_csv(only_file(tmp_path, "compare_result_*.csv"))
    header, rows = rows[0], rows[1:]
    bench, result = header.index("Bench Name"), header.index("Result")
    matched = [row for row in rows if row[bench] != "N/A"]
    assert len(matched) == len([r for r in rows if not r[0].startswith("Jit.")])
    assert {row[result] for row in matched} == {"pass"}


def _saved(directory: Path, record: dict) -> np.ndarray:
    return np.load(directory / "dump_tensor_data" / record["data_name"], allow_pickle=False)


@pytest.mark.slow
@pytest.mark.parametrize("task", ("md5", "tensor"))
@pytest.mark.parametrize("step", (0, 1))
def test_md5_and_tensor_dumps_agree_with_the_statistics_and_the_saved_arrays(dumps, task, step):
    mine = ours(dumps, task, "mix", step)
    data = load(mine, "dump.json")["data"]
    statistics = load(ours(dumps, "statistics", "mix", step), "dump.json")["data"]
    assert list(data) == list(statistics)
    checked = 0
    for name, body in data.items():
        for path, record in tensor_leaves(body):
            same = dict(tensor_leaves(statistics[name]))[path]
            assert {k: record[k] for k in ("dtype", "shape", "Max", "Min", "Mean", "Norm")} == \
                   {k: same[k] for k in ("dtype", "shape", "Max", "Min", "Mean", "Norm")}, (name, path)
            checked += 1
            if task == "md5":
                assert set(record) - set(same) == {"md5"} and len(record["md5"]) == 8
                continue
            assert record["data_name"] == f"{name}{path.replace('.input_args', '.input').replace('.input_kwargs', '.kwargs')}.npy" \
                or ".parameters" in path or "parameters_grad" in name, (name, path, record["data_name"])
            array = _saved(mine, record)
            assert list(array.shape) == record["shape"]
            values = array.astype(np.float64).reshape(-1)
            if values.size and array.dtype != np.bool_:
                # computed in float64, written in float32 (the dtype of every float tensor here; integer
                # tensors' Mean and Norm too)
                assert record["Max"] == values.max() and record["Min"] == values.min()
                assert record["Mean"] == float(np.float32(values.mean()))
                assert record["Norm"] == float(np.float32(math.sqrt(np.dot(values, values))))
    assert checked > 300
    if task == "md5":
        tensors = load(ours(dumps, "tensor", "mix", step), "dump.json")["data"]
        directory = ours(dumps, "tensor", "mix", step)
        for name, body in data.items():
            saved = dict(tensor_leaves(tensors[name]))
            for path, record in tensor_leaves(body):
                array = np.ascontiguousarray(_saved(directory, saved[path]))
                assert record["md5"] == format(zlib.crc32(array.tobytes()), "08x"), (name, path)


CROSS_CASES = [("L0", ["-cm"]), ("L0", ["-cm", "cell_mapping.yaml"]), ("L0", ["-lm", "layer_mapping.yaml"]),
               ("L0", ["-dm", "data_mapping.yaml"]), ("L1", []), ("L1", ["-am"]), ("L1", ["-lm", "layer_mapping.yaml"]),
               ("mix", ["-am"]), ("mix", ["-am", "api_mapping.yaml"]), ("mix", ["-cm", "cell_mapping.yaml"]),
               ("mix", ["-lm", "layer_mapping.yaml"]), ("mix", ["-lm"]), ("mix", ["-dm", "data_mapping.yaml"])]


def _cross_table(target: Path, level: str, args: list, out: Path) -> list:
    mapped = [str(FIXTURES / "cross" / "mappings" / a) if a.endswith(".yaml") else a for a in args]
    assert run_cli(["compare", "-tp", target, "-gp", FIXTURES / "cross" / f"pt_{level}" / "dump.json", "-o", out,
                    "--csv", "-c", *mapped]) == 0
    return read_csv(only_file(out, "compare_result_*.csv"))


@pytest.mark.slow
@pytest.mark.parametrize("level, args", CROSS_CASES, ids=[f"{c[0]}{''.join(c[1])}" for c in CROSS_CASES])
def test_mindspore_against_pytorch_mappings_pair_our_dump_as_the_references(dumps, tmp_path, level, args):
    """Every mapping mode pairs our MindSpore dump with the refdata PyTorch dump exactly as it pairs the reference's
    MindSpore dump, with the same verdicts."""
    ours_table = _cross_table(ours(dumps, "statistics", level, 0) / "dump.json", level, args, tmp_path / "ours")
    their_table = _cross_table(reference(level, 0) / "dump.json", level, args, tmp_path / "theirs")
    header = ours_table[0]
    keep = [header.index(c) for c in ("NPU Name", "Bench Name", "NPU Dtype", "NPU Tensor Shape", "Result")]
    mine = [[row[i] for i in keep] for row in ours_table[1:] if not row[0].startswith("Jit.")]
    theirs = [[row[i] for i in keep] for row in their_table[1:]]
    assert mine == theirs


@pytest.mark.slow
def test_acc_check_and_op_generate_take_our_dump_as_the_references(dumps, tmp_path, capsys):
    """acc_check checks the same APIs of our L1 dump with the same verdicts as of the reference's; op_generate
    (PyTorch scripts only) refuses both the same way."""
    tables = []
    for side, dump in (("ours", ours(dumps, "statistics", "L1", 0) / "dump.json"),
                       ("theirs", reference("L1", 0) / "dump.json")):
        assert run_cli(["acc_check", "-api_info", dump, "-o", tmp_path / side]) == 0
        tables.append(read_csv(only_file(tmp_path / side, "accuracy_checking_result_*.csv")))
    assert tables[0] == tables[1] and len(tables[0]) > 5
    messages = []
    for side, dump in (("ours", ours(dumps, "statistics", "L1", 0) / "dump.json"),
                       ("theirs", reference("L1", 0) / "dump.json")):
        config = tmp_path / f"{side}.json"
        config.write_text(json.dumps({"dump_json_path": str(dump), "api_name": "Mint.add.0.forward"}))
        capsys.readouterr()
        assert run_cli(["op_generate", "-i", config, "-o", tmp_path]) != 0
        messages.append(capsys.readouterr().err.replace(str(dump), "DUMP"))
    assert messages[0] == messages[1] and "mindspore dump" in messages[0]


@pytest.mark.slow
def test_graph_compares_our_mix_dump_with_the_references(dumps, tmp_path):
    """`msprobe graph` compares our mix dump (target) with the reference's (golden): every node but our Jit entry
    has its partner."""
    assert run_cli(["graph", "-tp", ours(dumps, "statistics", "mix", 0), "-gp", reference("mix", 0),
                    "-o", tmp_path]) == 0
    graph = json.loads(only_file(tmp_path, "compare_*.vis").read_text())
    nodes = graph["NPU"]["node"]
    assert len(nodes) == len(graph["Bench"]["node"]) + 1 > 200
    assert [name for name, node in nodes.items() if not node.get("matched_node_link")] == ["Jit.SGD.0.forward"]
