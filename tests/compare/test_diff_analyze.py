"""First-divergence analysis (-da) on the real dumps: the known first divergent op of every case."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, fixture_pair, only_file, run_cli


def analysis(out):
    return json.loads(only_file(out, "diff_analyze_*.json").read_text())


@pytest.mark.parametrize("case, first", [
    ("stats_L1_step0", "Functional.linear.2.forward"),
    ("stats_mix_step0", "Functional.linear.2.forward"),
    ("md5_mix_step0", "Functional.linear.2.forward"),
    ("stats_L0_step0", "Module.blocks.0.mlp.fc1.CastLinear.forward.0"),
])
def test_single_process_file_pair(case, first, tmp_path):
    target, golden = fixture_pair(case)
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "-da"]) == 0
    result = analysis(tmp_path)
    assert list(result) == ["rank_0", "dtype_aware", "culprit"]
    assert result["rank_0"][0]["op_name"] == first and result["rank_0"][0]["role"] == "origin"
    # the only perturbation is the intended bfloat16 cast of blocks.0.mlp.fc1: no op introduces error
    assert result["dtype_aware"]["op_name"] is None and result["dtype_aware"]["rank"] is None
    # the compare's culprit is where the precision drops, the first divergence itself
    assert result["culprit"]["op_name"] == first and result["culprit"]["result"] in ("error", "warning")
    config = json.loads(only_file(tmp_path, "next_dump_*_target.json").read_text())
    assert result["culprit"]["next_dump_config"] == str(only_file(tmp_path, "next_dump_*_target.json"))
    # the fixtures lie in folders not named step<N>: every step
    assert config["task"] == "tensor" and config["step"] == [] and config["tensor"]["list"][0].startswith(
        first.rsplit(".", 2)[0] if first.startswith("Module.") else first)
    per_rank = json.loads(only_file(tmp_path, "compare_result_*.json").read_text())
    assert per_rank[first]["is_same"] is False
    origins = {item["Error_Origin"] for entry in per_rank.values() for item in entry["op_items"]
               if "Error_Origin" in item}
    if case.startswith("md5"):
        assert not origins
    else:
        assert "introduced" not in origins and "dtype" in origins
    if case != "stats_L0_step0" and not case.startswith("md5"):
        outputs = [item for item in per_rank[first]["op_items"] if item["state"] == "output"]
        assert [item["Error_Origin"] for item in outputs] == ["dtype"]
    assert not list(tmp_path.glob("*.csv")) and not list(tmp_path.glob("*.xlsx"))


def test_step_folder_with_proc_dirs(tmp_path):
    for side in ("target", "golden"):
        shutil.copytree(FIXTURES / "stats_mix_step0" / side, tmp_path / side / "proc42")
    assert run_cli(["compare", "-tp", tmp_path / "target", "-gp", tmp_path / "golden", "-o", tmp_path / "o", "-da"]) == 0
    assert analysis(tmp_path / "o")["proc42"][0]["op_name"] == "Functional.linear.2.forward"
    assert analysis(tmp_path / "o")["dtype_aware"]["op_name"] is None


def test_tensor_dump(tensor_mix, tmp_path, capsys):
    target, golden = tensor_mix
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "-da"]) == 0
    result = analysis(tmp_path)
    assert result["rank_0"][0]["op_name"] == "Functional.linear.2.forward"
    assert result["dtype_aware"]["op_name"] is None
    assert "Dtype-aware: no op introduces error" in capsys.readouterr().out
    per_rank = json.loads(only_file(tmp_path, "compare_result_*.json").read_text())
    outputs = [i for i in per_rank["Functional.linear.2.forward"]["op_items"] if i["state"] == "output"]
    assert [i["Error_Origin"] for i in outputs] == ["dtype"]


def test_multirank_origin_and_spread(multirank_step0, tmp_path, capsys):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "-da"]) == 0
    result = analysis(tmp_path)
    assert list(result)[0] == "rank_1"
    assert result["rank_1"][0] == {**result["rank_1"][0], "op_name": "Functional.linear.2.forward", "role": "origin"}
    for rank in (0, 2, 3):
        (node,) = result[f"rank_{rank}"]
        assert node["op_name"] == "Distributed.all_reduce.0.forward"
        assert node["role"] == "received through communication"
    assert "Divergence starts on rank1 at Functional.linear.2.forward" in capsys.readouterr().out
    assert len(list(tmp_path.glob("compare_result_rank*.json"))) == 4
    assert result["dtype_aware"] == {**result["dtype_aware"], "op_name": None, "rank": None}


def test_identical_dumps_have_no_divergence(tmp_path, capsys):
    target, _ = fixture_pair("stats_L0_step0")
    assert run_cli(["compare", "-tp", target, "-gp", target, "-o", tmp_path, "-da"]) == 0
    assert not list(tmp_path.glob("diff_analyze_*.json"))
    assert "No divergence found" in capsys.readouterr().out


def test_a_single_process_folder_is_named_alike_in_the_console_the_files_and_the_api(tmp_path, capsys):
    """A step folder of one proc<pid> folder: the console, the table's name, diff_analyze_*.json and the Python
    API all call the process proc<pid>."""
    import msprobe

    for side, pid in (("target", 7437), ("golden", 7501)):
        folder = tmp_path / side / "step0" / f"proc{pid}"
        folder.mkdir(parents=True)
        shutil.copy(FIXTURES / "stats_L1_step0" / side / "dump.json", folder)
    target, golden = tmp_path / "target" / "step0", tmp_path / "golden" / "step0"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "out", "-da"]) == 0
    console = capsys.readouterr().out
    assert "Divergence starts on proc7437 at Functional.linear.2.forward" in console
    only_file(tmp_path / "out", "compare_result_proc7437_*.json")
    result = analysis(tmp_path / "out")
    assert list(result) == ["proc7437", "dtype_aware", "culprit"]
    assert result["proc7437"][0]["op_name"] == "Functional.linear.2.forward"
    # a proc<pid> folder is no rank: the next dump selects every rank
    assert result["culprit"]["rank"] == 0 and json.loads(only_file(tmp_path / "out", "next_dump_*_target.json").read_text())[
        "rank"] == []
    found = msprobe.diff_analyze(target, golden)
    assert list(found.record) == ["proc7437", "dtype_aware", "culprit"] and found.ops[0].label == "proc7437"
    assert found.lines[0].startswith("Divergence starts on proc7437 at ")


def test_da_needs_no_more_memory_than_the_plain_compare(tmp_path):
    """-da streams its per-rank json one entry at a time (issue 28: it built one dict per row and the whole text,
    4x the plain compare's memory). Python allocations (numpy's included) at their peak, traced in this process
    after a warm-up run of each command; benchmarks/bench_diff_analyze.py measures the process at 50k entries."""
    import tracemalloc

    target, golden = fixture_pair("stats_mix_step0")

    def peak(name: str, *extra) -> int:
        argv = ["compare", "-tp", target, "-gp", golden, *extra]
        assert run_cli([*argv, "-o", tmp_path / f"{name}_warm"]) == 0
        tracemalloc.start()
        try:
            assert run_cli([*argv, "-o", tmp_path / name]) == 0
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    plain, da = peak("plain"), peak("da", "-da")
    assert da < 1.3 * plain, (plain, da)


def test_the_large_jump_of_an_op_that_cannot_amplify_is_reported(tmp_path, capsys):
    """conv2d's output 30 % off, the relu after it 99 % off (a relu cannot raise its Max above its input's): -da
    names the conv as where the runs part and the relu as the first large difference (issue 32: the statistics
    amplification allowance, 16 x, had called the relu inherited and hidden the jump)."""
    def tensor(mx, mn, mean, norm, shape=(2, 4, 6, 6)):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": mx, "Min": mn,
                "Mean": mean, "Norm": norm, "requires_grad": False}

    x = tensor(2.0, -2.0, 0.01, 17.0)
    w = tensor(0.5, -0.5, 0.0, 3.0, (4, 4, 3, 3))
    golden_conv, target_conv = tensor(3.0, -3.0, 0.1, 20.0), tensor(3.9, -3.0, 0.1, 26.0)
    golden_relu, target_relu = tensor(3.0, 0.0, 0.6, 14.0), tensor(3.0, 0.0, 0.0066, 0.14)
    for side, conv, relu in (("target", target_conv, target_relu), ("golden", golden_conv, golden_relu)):
        data = {"Functional.conv2d.0.forward": {"input_args": [x, w], "input_kwargs": {}, "output": [conv]},
                "Functional.relu.0.forward": {"input_args": [conv], "input_kwargs": {}, "output": [relu]}}
        (tmp_path / side).mkdir()
        (tmp_path / side / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                               "framework": "pytorch", "dump_data_dir": None,
                                                               "data": data}))
    assert run_cli(["compare", "-tp", tmp_path / "target" / "dump.json", "-gp", tmp_path / "golden" / "dump.json",
                    "-o", tmp_path / "out", "-da"]) == 0
    nodes = analysis(tmp_path / "out")["rank_0"]
    assert nodes[0]["op_name"] == "Functional.conv2d.0.forward"
    assert [n["op_name"] for n in nodes if n["role"] == "first large difference"] == ["Functional.relu.0.forward"]


# ---------------------------------------------------------------------------------------------- issue 40
@pytest.mark.parametrize("flag, extension", [("--csv", "csv"), ("--xlsx", "xlsx")])
def test_da_writes_its_tables_in_the_format_asked_for(flag, extension, tmp_path):
    """Issue 40: -da ignored --csv (JSON tables only). With --csv (--xlsx) each pair's diff-mode table is also
    written as compare_result_<ts>.csv (.xlsx): the rows and columns of its JSON table, in the same order."""
    from conftest import read_csv

    target, golden = fixture_pair("stats_mix_step0")
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "-da", flag]) == 0
    per_rank = json.loads(only_file(tmp_path, "compare_result_*.json").read_text())
    items = [item for entry in per_rank.values() for item in entry["op_items"]]
    table = only_file(tmp_path, f"compare_result_*.{extension}")
    assert table.stem == only_file(tmp_path, "compare_result_*.json").stem
    if extension == "csv":
        rows = read_csv(table)
    else:
        import openpyxl
        rows = [["" if v is None else str(v) for v in row]
                for row in openpyxl.load_workbook(table, read_only=True).active.iter_rows(values_only=True)]
    assert rows[0] == list(items[0])
    assert [row[0] for row in rows[1:]] == [item["NPU Name"] for item in items]
    culprit = analysis(tmp_path)["culprit"]["item"]
    (row,) = [r for r in rows[1:] if r[0] == culprit]
    record = dict(zip(rows[0], row))
    assert (record["state"], record["api_origin_name"], record["Error_Origin"]) == (
        "output", "Functional.linear.2.forward", "dtype")
    assert float(record["NPU max"]) == next(i for i in items if i["NPU Name"] == culprit)["NPU max"]


def test_the_printed_next_compare_is_a_plain_compare_in_the_format_asked_for(tmp_path, caplog):
    """Issue 40: the next command repeated -da: the compare of the culprit's real tensors writes the table (and
    the advisor), in the format the -da run was asked for."""
    import logging

    target, golden = fixture_pair("stats_mix_step0")
    for flags in ([], ["--csv"]):
        out = tmp_path / ("csv" if flags else "plain")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="msprobe"):
            assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-da", *flags]) == 0
        advice = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Next step"))
        (then,) = [line for line in advice.splitlines() if "then:" in line]
        assert then.split("then:", 1)[1].split()[:2] == ["msprobe", "compare"]
        assert "-da" not in then.split() and ("--csv" in then.split()) == bool(flags)


@pytest.mark.parametrize("layout", ["step folder", "rank folder"])
def test_a_single_process_folder_named_rank_reads_as_rank_0(layout, tmp_path, capsys):
    """Issue 40: a single-process dump's folder is `rank` (no id): the console said "Divergence starts on rank
    at ...". It is rank 0, as diff_analyze_*.json keys it."""
    for side in ("target", "golden"):
        folder = tmp_path / side / "step0" / "rank"
        folder.mkdir(parents=True)
        shutil.copy(FIXTURES / "stats_L1_step0" / side / "dump.json", folder)
    target, golden = (tmp_path / side / "step0" for side in ("target", "golden"))
    if layout == "rank folder":
        target, golden = target / "rank", golden / "rank"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "out", "-da"]) == 0
    console = capsys.readouterr().out
    assert "Divergence starts on rank 0 at Functional.linear.2.forward" in console
    assert "on rank at" not in console and " rank (entry" not in console
    assert "Functional.linear.2.forward on rank 0 (entry" in console             # the culprit line
    assert list(analysis(tmp_path / "out"))[0] == "rank_0"
