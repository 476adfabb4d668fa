"""msprobe multi_acc_check (APIs split over worker processes) and msprobe op_generate (standalone scripts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, only_file, read_csv, run_cli

L1 = FIXTURES / "stats_L1_step0" / "target" / "dump.json"


def _rows(path):
    return read_csv(path)[1:]


@pytest.fixture(scope="module")
def single_and_multi(tmp_path_factory):
    base = tmp_path_factory.mktemp("multi")
    assert run_cli(["acc_check", "-api_info", L1, "-o", base / "single"]) == 0
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-o", base / "multi"]) == 0
    return base / "single", base / "multi"


def test_multi_union_equals_single_run(single_and_multi, capsys):
    single, multi = single_and_multi
    single_rows = _rows(only_file(single, "accuracy_checking_result_*.csv"))
    single_details = _rows(only_file(single, "accuracy_checking_details_*.csv"))
    device_rows = [_rows(only_file(multi, f"accuracy_checking_result_*_device{d}.csv")) for d in (0, 1)]
    device_details = [_rows(only_file(multi, f"accuracy_checking_details_*_device{d}.csv")) for d in (0, 1)]
    assert [len(rows) for rows in device_rows] == [151, 151]          # contiguous halves of 302 APIs
    assert device_rows[0] + device_rows[1] == single_rows              # same APIs, same order, same statuses
    # same inputs (seeded per API position), same outputs and statuses; metric values may differ in the last bits
    # of float32 reductions (the in-process single run and the spawned workers use different thread counts)
    key = [0, 1, 2, 3, 21]
    assert [[row[i] for i in key] for row in device_details[0] + device_details[1]] == \
        [[row[i] for i in key] for row in single_details]
    assert {row[0] for row in device_rows[0]}.isdisjoint(row[0] for row in device_rows[1])
    summary = read_csv(only_file(multi, "accuracy_checking_summary_*.csv"))
    assert summary[0][0] == "\ufeffDevice"
    assert summary[3][:7] == ["total", "302", "302", "302", "301", "1", "0"]
    assert sorted(summary[1][4:7] + summary[2][4:7]) == sorted(["150", "1", "0", "151", "0", "0"])
    assert json.loads(only_file(multi, "accuracy_checking_info_*_device1.json").read_text())["runs"][0][
        "device"] == "cpu"


def test_multi_resume_per_device(single_and_multi, tmp_path, capsys):
    _, multi = single_and_multi
    work = tmp_path / "resume"
    work.mkdir()
    for path in multi.glob("accuracy_checking_*_device*.csv"):
        (work / path.name).write_bytes(path.read_bytes())
    full = {d: only_file(work, f"accuracy_checking_result_*_device{d}.csv").read_bytes() for d in (0, 1)}
    details1 = only_file(work, "accuracy_checking_details_*_device1.csv").read_bytes()
    result1 = only_file(work, "accuracy_checking_result_*_device1.csv")
    lines = full[1].split(b"\r\n")
    result1.write_bytes(b"\r\n".join(lines[:41]) + b"\r\n" + lines[41][:5])   # killed mid-row after 40 APIs
    code = run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-csv_path",
                    only_file(work, "accuracy_checking_result_*_device0.csv")])
    assert code == 0
    assert result1.read_bytes() == full[1]
    assert only_file(work, "accuracy_checking_details_*_device1.csv").read_bytes() == details1
    assert only_file(work, "accuracy_checking_result_*_device0.csv").read_bytes() == full[0]
    summary = read_csv(only_file(work, "accuracy_checking_summary_*.csv"))
    assert [row[3] for row in summary[1:]] == ["0", "111", "111"]       # checked in this run
    assert summary[3][2] == "302"
    # resuming with other device ids is refused, nothing written
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "2", "-csv_path", result1]) == 1
    assert "device2.csv does not exist" in capsys.readouterr().err


def test_multi_bad_devices(tmp_path, capsys):
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "0", "-o", tmp_path / "o"]) == 1
    assert "device ids must be unique" in capsys.readouterr().err
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "4096", "-o", tmp_path / "o"]) == 1
    assert "out of range" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _config(tmp_path, **fields):
    path = tmp_path / f"config_{len(list(tmp_path.glob('config_*')))}.json"
    path.write_text(json.dumps(fields))
    return path


def _run_script(path):
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(path))
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("api, standard, metrics", [
    ("Functional.linear.0", "ULP error Standard", ["Maximum ULP Error", "Mean ULP Error", "ULP Error Proportion"]),
    ("Functional.gelu.0", "Benchmark Standard", ["Small Value Error Proportion", "Maximum Relative Error",
                                                 "Mean Relative Error", "Root Mean Squared Error", "Error Balance"]),
])
def test_op_generate_random_forward(tmp_path, api, standard, metrics):
    out = tmp_path / "out"
    out.mkdir()
    config = _config(tmp_path, dump_json_path=str(L1), api_name=api, extract_api_path="extract/api.json",
                     propagation="forward", data_mode="random_data", random_seed=7, iter_times=2)
    assert run_cli(["op_generate", "-i", config, "-o", out]) == 0
    script = out / f"{api}.forward.py"
    assert [p.name for p in out.iterdir()] == [script.name]
    assert set(json.loads((tmp_path / "extract" / "api.json").read_text())) == {f"{api}.forward",
                                                                               f"{api}.backward"}
    printed = _run_script(script)
    assert printed.count("Compare Standard") == 2 and "iter: 1:" in printed          # iter_times 2
    assert "| Metric " in printed and "(2, 8, " in printed
    assert f"| {standard}" in printed
    assert "| Dtype of out_device" in printed and "torch.float64" in printed        # fp32 raised to float64
    for metric in metrics:
        assert f"| {metric}" in printed
    assert printed.rstrip().endswith("Compare finished.")
    assert _run_script(script) == printed                                          # seeded: same inputs


def test_op_generate_legacy_form_backward(tmp_path):
    config = _config(tmp_path, dump_json_path=str(L1), api_name="Functional.linear.0", propagation="backward")
    assert run_cli(["-f", "pytorch", "op_generate", "-i", config, "-o", tmp_path]) == 0
    printed = _run_script(tmp_path / "Functional.linear.0.backward.py")
    assert [line for line in printed.splitlines() if line.startswith("index")] == ["index 0:", "index 1:", "index 2:"]
    assert "| (96, 32)" in printed and "Compare finished." in printed


def test_op_generate_real_data(tmp_path, tensor_mix):
    target, _ = tensor_mix
    config = _config(tmp_path, dump_json_path=target, api_name="Functional.gelu.0", data_mode="real_data")
    assert run_cli(["op_generate", "-i", config, "-o", tmp_path]) == 0
    script = tmp_path / "Functional.gelu.0.forward.py"
    text = script.read_text()
    tensor_dir = os.path.join(os.path.dirname(target), "dump_tensor_data")
    assert os.path.join(tensor_dir, "Functional.gelu.0.forward.input.0.pt") in text   # absolute data_name
    printed = _run_script(script)
    assert "real_data" in printed and "| Benchmark Standard" in printed and "Compare finished." in printed


def test_op_generate_errors(tmp_path, tensor_mix, capsys):
    target, _ = tensor_mix
    cases = [
        (dict(dump_json_path=str(L1), api_name="Functional.nothing.0"), "is not in"),
        (dict(dump_json_path=str(L1), api_name="Functional.gelu.0", propagation="sideways"), "propagation"),
        (dict(dump_json_path=str(L1), api_name="Functional.gelu.0", data_mode="real_data"), "no tensor files"),
        (dict(dump_json_path=str(L1), api_name="Tensor.__eq__.0", propagation="backward"), "backward"),
        (dict(dump_json_path=str(L1), api_name="Functional.gelu.0", iter_times=0), "iter_times"),
        (dict(dump_json_path=str(L1), api_name="x" * 31), "api_name"),
    ]
    out = tmp_path / "out"
    out.mkdir()
    for fields, message in cases:
        assert run_cli(["op_generate", "-i", _config(tmp_path, **fields), "-o", out]) == 1, fields
        err = capsys.readouterr().err
        assert err.startswith("msprobe op_generate: error:") and message in err, err
    assert list(out.iterdir()) == []
