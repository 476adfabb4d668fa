"""Two runs writing into one folder within one second never replace each other's files (issue 28): every writer claims
its stamp (msprobe/scale/stamp.py)."""

from __future__ import annotations

import json

import pytest
from helpers_bad_input import assert_success, run_inproc

from conftest import FIXTURES

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
