"""msprobe multi_acc_check (APIs split over worker processes) and msprobe op_generate (standalone scripts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import (
    FIXTURES,
    device_rows,
    in_dump_order,
    interrupt_after_markers,
    only_file,
    read_csv,
    run_cli,
)

pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0): multi_acc_check and "
                                        "op_generate replay PyTorch APIs")
pytestmark = pytest.mark.slow       # every test replays APIs in worker processes or generated scripts

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
    per_device = device_rows(multi)
    device_details = device_rows(multi, kind="details")
    # -n 8 (the default): 8 contiguous splits of 302 // 8 = 37 APIs, the last 43; splits 0 2 4 6 on device 0,
    # 1 3 5 7 on device 1 (spec §5.10)
    assert [len(rows) for rows in per_device] == [4 * 37, 3 * 37 + 43]
    assert [row[0] for row in per_device[0][36:38]] == [single_rows[36][0], single_rows[74][0]]
    assert per_device[1][0] == single_rows[37] and per_device[1][-1] == single_rows[-1]
    assert in_dump_order(single_rows, per_device) == single_rows      # same APIs, same statuses
    # same inputs (seeded per API position), same outputs and statuses; metric values may differ in the last bits
    # of float32 reductions (the in-process single run and the spawned workers use different thread counts)
    key = [0, 1, 2, 3, 21]
    assert [[row[i] for i in key] for row in in_dump_order(single_details, device_details)] == \
        [[row[i] for i in key] for row in single_details]
    summary = read_csv(only_file(multi, "accuracy_checking_summary_*.csv"))
    assert summary[0] == ["\ufeffDevice", "APIs", "Recorded", "Checked this run", "Passed", "Warning", "Error",
                          "Skipped", "Result file"]
    assert summary[1][:7] == ["0", "148", "148", "148", "147", "1", "0"]       # Functional.linear.2: warning
    assert summary[2][:7] == ["1", "154", "154", "154", "154", "0", "0"]
    assert summary[3][:7] == ["total", "302", "302", "302", "301", "1", "0"]
    assert summary[1][8].endswith("_device0.csv") and summary[3][8] == ""
    assert json.loads(only_file(multi, "accuracy_checking_info_*_device1.json").read_text()) == {"runs": [
        {"api_info": str(L1), "device": "cpu", "benchmark": "cpu (float64; float32 for float16/bfloat16 inputs)",
         "inputs": "random-data"}]}
    assert not list(multi.glob("*_split*"))        # the splits' files were joined into the devices' files


@pytest.mark.serial
def test_multi_interrupted_run_resumes_to_the_same_files(single_and_multi, tmp_path):
    _, multi = single_and_multi
    for attempt in range(3):
        # the Ctrl-C follows the second of eight task markers; on a loaded machine this test process may be scheduled
        # again only once the other six are done too: then the run has finished (exit 0) and is tried afresh
        out = tmp_path / f"out{attempt}"
        markers = out / ".msprobe_done" / "multi_acc_check" / "tasks"
        code, printed, err = interrupt_after_markers(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-o", out],
                                                     markers, 2)
        if code != 0 or len(list(markers.glob("*.json"))) < 8:
            break
    assert code == 130 and "interrupted" in err, err
    splits = sorted(p.name for p in out.glob("accuracy_checking_result_*_split*.csv"))
    assert len(splits) >= 2 and not list(out.glob("accuracy_checking_result_*_device?.csv"))
    assert "Continue this run with -csv_path" in printed and "(and -d 0 1 -n 8)" in printed
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-csv_path", out / splits[-1]]) == 0
    for kind in ("result_*_device{}.csv", "details_*_device{}.csv", "info_*_device{}.json"):
        for d in (0, 1):   # the info files too: a continued split's repeated run entry is not repeated
            assert only_file(out, "accuracy_checking_" + kind.format(d)).read_bytes() == \
                only_file(multi, "accuracy_checking_" + kind.format(d)).read_bytes()
    assert not list(out.glob("*_split*"))
    summary = read_csv(only_file(out, "accuracy_checking_summary_*.csv"))
    assert summary[3][:3] == ["total", "302", "302"] and 0 < int(summary[3][3]) < 302      # checked in this run


def test_multi_resume_of_a_complete_run_and_other_splits(single_and_multi, tmp_path, capsys):
    _, multi = single_and_multi
    work = tmp_path / "resume"
    work.mkdir()
    for path in multi.glob("accuracy_checking_*_device*"):
        (work / path.name).write_bytes(path.read_bytes())
    before = {path.name: path.read_bytes() for path in work.iterdir()}
    device0 = only_file(work, "accuracy_checking_result_*_device0.csv")
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-csv_path", device0]) == 0
    assert {path.name: path.read_bytes() for path in work.iterdir() if "summary" not in path.name} == before
    summary = read_csv(only_file(work, "accuracy_checking_summary_*.csv"))
    assert [row[2:4] for row in summary[1:]] == [["148", "0"], ["154", "0"], ["302", "0"]]
    # other -d, -n or -f make other splits: refused, nothing written
    for other in (["-d", "0", "1", "-n", "4"], ["-d", "0", "1", "2"], ["-d", "0", "1", "-f"]):
        assert run_cli(["multi_acc_check", "-api_info", L1, *other, "-csv_path", device0]) == 1
        err = capsys.readouterr().err
        assert "does not fit the splits of" in err and "resume with the -d, -n and -f of the interrupted run" in err
    assert {path.name: path.read_bytes() for path in work.iterdir() if "summary" not in path.name} == before


def test_multi_forwards_the_acc_check_options(tmp_path, capsys):
    config = _config(tmp_path, acc_check={"white_list": ["matmul", "gelu", "linear"], "black_list": ["gelu"]})
    options = ["-f", "-config", config, "-save_error_data"]
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "single", *options]) == 0
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "2", "-n", "5", "-o", tmp_path / "multi",
                    *options]) == 0
    printed = capsys.readouterr().out
    assert "244 APIs (58 dropped by -f) in 5 splits (48 each, the last 52) over 3 devices (0 1 2)" in printed
    # the per-device lines name each count and the device's result file: the 13 white-listed APIs (linear.2
    # warns), the other 231 SKIP rows
    assert "multi_acc_check total: 244 APIs, 244 recorded (244 checked in this run), 12 passed, 1 with warnings, " \
        "0 failed, 231 skipped." in printed
    assert "multi_acc_check device 2: 48 APIs" in printed and "_device2.csv." in printed
    single_rows = _rows(only_file(tmp_path / "single", "accuracy_checking_result_*.csv"))
    per_device = device_rows(tmp_path / "multi", devices=(0, 1, 2))
    assert [len(rows) for rows in per_device] == [48 + 48, 48 + 52, 48]      # splits 0 3 | 1 4 | 2
    assert in_dump_order(single_rows, per_device) == single_rows
    # -config: only the white-listed APIs minus the black-listed gelu are replayed, the rest are SKIP rows
    checked = {row[0]: row[1:3] for row in single_rows if row[1] != "SKIP"}
    assert checked == {**{f"Torch.matmul.{i}": ["pass", "pass"] for i in range(4)},
                       **{f"Functional.linear.{i}": ["pass", "pass"] for i in range(9)},
                       "Functional.linear.2": ["warning", "pass"]}
    # -save_error_data: the API that did not pass, in the run's one error directory
    (saved,) = (tmp_path / "multi").glob("ut_error_data*")
    assert sorted(p.name for p in saved.iterdir()) == sorted(
        p.name for p in only_file(tmp_path / "single", "ut_error_data*").iterdir())
    assert (saved / "Functional.linear.2.forward.output.device.0.pt").is_file()


def test_multi_refuses_what_acc_check_refuses(tmp_path, capsys):
    cases = [(["-j"], "-j/--jit_compile applies to Ascend NPU only (torch_npu); the device under test here is cpu"),
             (["--max-abs-err", "0.01"], "--max-abs-err applies to MindSpore dumps"),
             (["-config", tmp_path / "nothing.json"], "-config file"),
             (["-d", "0", "0"], "device ids must be unique: 0 0")]
    for extra, message in cases:
        assert run_cli(["multi_acc_check", "-api_info", L1, "-o", tmp_path / "o", *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith("msprobe multi_acc_check: error: ") and message in err and err.count("\n") == 1, err
    for bad in ("0", "65", "x"):
        with pytest.raises(SystemExit) as exit_info:
            run_cli(["multi_acc_check", "-api_info", L1, "-o", tmp_path / "o", "-n", bad])
        assert exit_info.value.code == 2
        assert f"argument -n/--num_splits: invalid number of splits '{bad}' (an integer 1-64)" in \
            capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_multi_legacy_form(tmp_path, capsys):
    out = tmp_path / "legacy"
    # -f after the command is -f/--filter_api; -n 1: one split, on the first device
    assert run_cli(["-f", "pytorch", "multi_run_ut", "-api_info", L1, "-d", "3", "4", "-n", "1", "-o", out,
                    "-f"]) == 0
    assert [len(rows) for rows in device_rows(out, devices=(3, 4))] == [244, 0]
    assert "-n 1 splits for 2 devices: devices 4 get no APIs." in capsys.readouterr().out
    assert run_cli(["-f", "mindspore", "multi_run_ut", "-api_info", L1, "-o", tmp_path / "x"]) == 1
    assert "-f mindspore was given (1.x form) but" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


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
    # each output's metrics table is followed by the verdict of each metric and the output's overall one
    assert printed.count("| Metric ") == 4 and printed.count("| Result ") == 2 * 2 * 1 + 0
    for metric in metrics:
        assert re.search(rf"\| {metric} +\| (pass|warning|error|-) +\|", printed), metric
    assert len(re.findall(r"\| Result +\| (pass|warning|error) +\|", printed)) == 2
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


def test_op_generate_from_an_extracted_api(tmp_path, capsys):
    """Section 6 of issue 18: api_name and dump_json_path may be left out when extract_api_path holds the API."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    config = _config(tmp_path, dump_json_path=str(L1), api_name="Functional.gelu.0", extract_api_path="api.json")
    assert run_cli(["op_generate", "-i", config, "-o", first]) == 0
    assert run_cli(["op_generate", "-i", _config(tmp_path, extract_api_path="api.json"), "-o", second]) == 0
    name = "Functional.gelu.0.forward.py"
    assert (second / name).read_text() == (first / name).read_text()
    capsys.readouterr()
    cases = [(dict(dump_json_path=str(L1)), "dump_json_path is given without api_name"),
             ({}, "give api_name"),
             (dict(extract_api_path="api.json", api_name="Functional.relu.0"), "not the API Functional.relu.0"),
             (dict(extract_api_path="missing.json"), "does not exist")]
    for fields, message in cases:
        assert run_cli(["op_generate", "-i", _config(tmp_path, **fields), "-o", second]) == 1, fields
        err = capsys.readouterr().err
        assert err.startswith("msprobe op_generate: error:") and message in err, err


@pytest.mark.parametrize("name, value, dtype, expected", [
    ("Small Value Error Proportion", 1.0, "float32", "pass"), ("Small Value Error Proportion", 1.5, "float32",
                                                                "warning"),
    ("Small Value Error Proportion", 2.01, "float32", "error"), ("Maximum Relative Error", 9.9, "float32", "warning"),
    ("Maximum Relative Error", 10.5, "float32", "error"), ("Mean Relative Error", 0.2, "float16", "pass"),
    ("Root Mean Squared Error", 2.5, "float32", "error"), ("Error Balance", 1.2, "bfloat16", "warning"),
    ("Error Rate", 0.0, "int64", "pass"), ("Error Rate", 0.01, "bool", "error"),
    ("Relative Error Ratio", 0.0, "float16", "pass"), ("Absolute Error Ratio", 1e-9, "float16", "error"),
    ("Thousandth ratio", 0.9995, "float32", "pass"), ("Thousandth ratio", 0.999, "float32", "error"),
    ("Mean ULP Error", 63.0, "float32", "pass"), ("Mean ULP Error", 64.0, "float32", "error"),
    ("Mean ULP Error", 3.0, "float16", "-"), ("ULP Error Proportion", 0.04, "float32", "pass"),
    ("ULP Error Proportion", 0.002, "float16", "error"), ("Maximum ULP Error", 1e6, "float32", "-"),
    ("Mean Relative Error", float("nan"), "float32", "error")])
def test_generated_script_verdicts(name, value, dtype, expected):
    """The verdict of every metric the script prints (spec acc_check.md §8 thresholds; ULP as §7)."""
    import torch

    from msprobe.acc_check.torch.op_script import verdict

    assert verdict(name, value, getattr(torch, dtype)) == expected


def test_generated_script_overall_verdict():
    import torch

    from msprobe.acc_check.torch.op_script import verdicts

    rows = [("Maximum ULP Error", 900.0), ("Mean ULP Error", 70.0), ("ULP Error Proportion", 0.01)]
    assert verdicts("ulp_compare", torch.float32, rows) == (
        [("Maximum ULP Error", "-"), ("Mean ULP Error", "error"), ("ULP Error Proportion", "pass")], "pass")
    assert verdicts("ulp_compare", torch.float32, [("Mean ULP Error", 70.0), ("ULP Error Proportion", 0.06)])[1] == \
        "error"
    rows = [("Small Value Error Proportion", 0.0), ("Maximum Relative Error", 3.0), ("Mean Relative Error", 0.1),
            ("Root Mean Squared Error", 0.1), ("Error Balance", 0.0)]
    assert verdicts("benchmark", torch.float32, rows)[1] == "warning"
