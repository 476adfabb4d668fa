"""A second hostile round over the commands (issue 28): numbers no parser expected, and what every command does
with them. Formulas, symbolic links and same-second runs have their own sections below."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers_bad_input import assert_success, run_inproc

from conftest import FIXTURES

ENTRY = "Functional.linear.2.forward"


def _perturbed_mix(tmp_path, **output_stats):
    """stats_mix_step0 with the statistics of ENTRY's first output replaced; a value "BIG" becomes a JSON
    integer of 401 digits, beyond the float range."""
    for side in ("target", "golden"):
        shutil.copytree(FIXTURES / "stats_mix_step0" / side, tmp_path / side)
    path = tmp_path / "target" / "dump.json"
    content = json.loads(path.read_text())
    content["data"][ENTRY]["output"][0].update(output_stats)
    path.write_text(json.dumps(content).replace('"BIG"', "1" + "0" * 400))
    return tmp_path / "target", tmp_path / "golden"


@pytest.mark.parametrize("extra", [["--csv"], ["--html"], ["-da"]])
def test_a_json_integer_beyond_the_float_range_is_an_infinity(tmp_path, capsys, extra):
    target, golden = _perturbed_mix(tmp_path, Max="BIG", Min="Infinity", Mean="-1e999")
    run = run_inproc(["compare", "-tp", target / "dump.json", "-gp", golden / "dump.json", "-o", tmp_path / "o",
                      *extra], capsys)
    assert_success(run)
    if extra == ["--csv"]:
        import csv

        with open(next((tmp_path / "o").glob("compare_result_*.csv")), encoding="utf-8") as handle:
            row = next(r for r in csv.DictReader(handle) if r["NPU Name"] == f"{ENTRY}.output.0")
        assert row["Max diff"] == "inf" and row["Min diff"] == "inf" and row["Mean diff"] == "-inf"
        assert row["Result"] == "error" and "nan/inf/-inf" in row["Err_message"]


@pytest.mark.parametrize("fmt", ["json", "db"])
def test_graph_of_an_integer_beyond_the_float_range(tmp_path, capsys, fmt):
    target, golden = _perturbed_mix(tmp_path, Max="BIG")
    run = run_inproc(["graph", "-tp", target, "-gp", golden, "-o", tmp_path / "o", "--format", fmt, "-j", "1"],
                     capsys)
    assert_success(run)


def test_api_frame_of_an_integer_beyond_the_float_range(tmp_path):
    pytest.importorskip("pandas")
    import msprobe

    target, golden = _perturbed_mix(tmp_path, Max="BIG")
    frame = msprobe.compare(str(target / "dump.json"), str(golden / "dump.json")).to_pandas()
    row = frame[frame["NPU Name"] == f"{ENTRY}.output.0"].iloc[0]
    assert row["NPU max"] == float("inf") and row["Max diff"] == float("inf")


# ------------------------------------------------------------------------------------------ same-second runs
SAME_SECOND = "20260101120000"


@pytest.fixture
def one_second(monkeypatch):
    """Every `now` a writer could name its files by is one second (the runs below take well under one): a writer
    that names its files by the current second without claiming it (scale/stamp.py) replaces the first run's."""
    from msprobe.scale import stamp

    monkeypatch.setattr(stamp, "timestamp", lambda: SAME_SECOND)


def _two_runs(capsys, argv: list) -> None:
    for _ in range(2):
        assert_success(run_inproc(argv, capsys))


def test_merge_result_twice_into_one_folder_in_one_second(tmp_path, capsys, one_second):
    merge = FIXTURES / "merge"
    _two_runs(capsys, ["merge_result", "-i", merge / "results", "-o", tmp_path, "-config",
                       merge / "merge_config.yaml"])
    assert len(list(tmp_path.glob("multi_ranks_compare_merge_*.xlsx"))) == 2


def test_code_mapping_twice_into_one_folder_in_one_second(tmp_path, capsys, one_second):
    toy = FIXTURES / "code_mapping" / "toy_graph.ir"
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "MatMul.Default_net-ToyNet_dense-Dense_MatMul-op0.2.10.1700000000.output.0.DefaultFormat.npy").write_bytes(
        b"")
    _two_runs(capsys, ["code_mapping", "--ir", toy, "--dump_data", dump, "-o", tmp_path / "out"])
    assert len(list((tmp_path / "out").glob("code_mapping_*.csv"))) == 2


def test_api_result_written_twice_into_one_folder_in_one_second(tmp_path, one_second):
    import msprobe

    target, golden = (str(FIXTURES / "stats_mix_step0" / side / "dump.json") for side in ("target", "golden"))
    result = msprobe.compare(target, golden)
    first = result.write(tmp_path, "csv")
    second = result.write(tmp_path, "csv")
    assert len(first) == len(second) == 2 and not set(first) & set(second)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.rsplit("/", 1)[-1] for p in first + second])                        # no run lock left behind


def test_acc_check_twice_into_one_folder_in_one_second(tmp_path, capsys, one_second):
    pytest.importorskip("torch")
    dump = tmp_path / "dump.json"
    content = json.loads((FIXTURES / "stats_L1_step0" / "target" / "dump.json").read_text())
    content["data"] = {k: v for k, v in content["data"].items() if k == "Functional.gelu.0.forward"}
    dump.write_text(json.dumps(content))
    _two_runs(capsys, ["acc_check", "-api_info", dump, "-o", tmp_path / "out"])
    assert len(list((tmp_path / "out").glob("accuracy_checking_result_*.csv"))) == 2


# ------------------------------------------------------------------------------------------ daemonic processes
def _compare_in_a_pool_worker(paths):
    import msprobe

    result = msprobe.compare(*paths, jobs=2)
    return [pair.label for pair in result.pairs], result.summary.rows


def test_api_compare_of_a_rank_folder_inside_a_pool_worker(multirank_step0):
    """Issue 28: a multiprocessing.Pool worker is daemonic and may not start processes; the ranks of a folder are
    compared one after the other in it (it raised a bare AssertionError)."""
    import multiprocessing

    target, golden = multirank_step0
    with multiprocessing.get_context("fork").Pool(1) as pool:
        labels, rows = pool.apply(_compare_in_a_pool_worker, ((str(target), str(golden)),))
    assert len(labels) >= 2 and rows > 0
