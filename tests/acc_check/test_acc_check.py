"""msprobe acc_check on the real TinyGPT dumps (PyTorch, CPU device vs float64/float32 CPU benchmark)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from msprobe.acc_check.results import DETAILS_HEADER, RESULT_HEADER

from conftest import FIXTURES, kill_acc_check_run, only_file, read_csv, run_cli, without_framework

L1 = FIXTURES / "stats_L1_step0" / "target" / "dump.json"
L0 = FIXTURES / "stats_L0_step0" / "target" / "dump.json"


def _run(tmp_path, *extra, api_info=L1):
    out = tmp_path / "out"
    code = run_cli(["acc_check", "-api_info", api_info, "-o", out, *extra])
    return code, out


def _results(out):
    result = read_csv(only_file(out, "accuracy_checking_result_*.csv"))
    details = read_csv(only_file(out, "accuracy_checking_details_*.csv"))
    return result, details


def test_l1_statistics_dump_random_data(tmp_path, capsys):
    code, out = _run(tmp_path)
    assert code == 0
    result, details = _results(out)
    assert result[0] == ["\ufeff" + RESULT_HEADER[0], *RESULT_HEADER[1:]]
    assert details[0] == ["\ufeff" + DETAILS_HEADER[0], *DETAILS_HEADER[1:]]
    assert len(DETAILS_HEADER) == 23
    rows = result[1:]
    assert len(rows) == 302            # every forward API of the dump is supported and checked
    statuses = {row[0]: tuple(row[1:3]) for row in rows}
    # Functional.linear.2 runs under bfloat16 autocast (its dumped output is bfloat16): a warning vs float32.
    assert statuses.pop("Functional.linear.2") == ("warning", "pass")
    assert set(statuses.values()) == {("pass", " "), ("pass", "pass")}
    assert sum(1 for v in statuses.values() if v[1] == "pass") == 33
    printed = capsys.readouterr().out
    assert "302 APIs checked of 302 supported (302 forward APIs in the dump), 301 passed, 1 with warnings, 0 failed, 0 skipped" \
        in printed
    assert "device cpu" in printed
    info = json.loads(only_file(out, "accuracy_checking_info_*.json").read_text())
    assert info["runs"][0]["device"] == "cpu"
    # every fp32 output is compared against float64 and named by its standard
    by_name = {row[0]: row for row in details[1:]}
    matmul = by_name["Torch.matmul.0.forward.output.0"]
    assert matmul[1:4] == ["torch.float64", "torch.float32", "(2, 4, 8, 8)"]
    assert matmul[21] == "pass" and "ULP误差比对法 (ulp_compare)" in matmul[22]
    # ULP columns filled: cancellation near zero gives a few elements above 32 ULP (1.2 % here), the mean stays
    # small. The share depends on the CPU's float32 matmul kernel (accumulation order), so it is bounded, not pinned.
    assert float(matmul[18]) > 32 and 0 < float(matmul[20]) < 0.05 and float(matmul[19]) < 10
    add = by_name["Tensor.__add__.0.forward.output.0"]
    assert "绝对阈值法 (absolute_threshold)" in add[22] and add[15:18] == ["0.00000000000000"] * 3
    eq = by_name["Tensor.__eq__.0.forward.output.0"]
    assert eq[1:3] == ["torch.bool", "torch.bool"] and eq[9] == "0.00000000000000"
    assert eq[22] == "Current torch.bool data, only perform binary comparison.\n"
    grad = by_name["Functional.cross_entropy.0.backward.output.0"]
    assert grad[1:4] == ["torch.float64", "torch.float32", "(16, 64)"] and grad[21] == "pass"


def test_noise_in_device_gelu_fails_with_benchmark_standard(tmp_path, monkeypatch):
    original = torch.nn.functional.gelu

    def noisy_gelu(*args, **kwargs):
        return original(*args, **kwargs) + 1e-2

    import msprobe.acc_check.runner  # noqa: F401  (the benchmark captured the original gelu)

    monkeypatch.setattr(torch.nn.functional, "gelu", noisy_gelu)
    code, out = _run(tmp_path)
    assert code == 0
    result, details = _results(out)
    statuses = {row[0]: row[1] for row in result[1:]}
    assert [n for n, s in statuses.items() if s == "error"] == ["Functional.gelu.0", "Functional.gelu.1"]
    row = next(r for r in details if r[0] == "Functional.gelu.0.forward.output.0")
    assert row[21] == "error"
    assert float(row[5]) == pytest.approx(1e-2, rel=1e-4)          # max abs error
    assert float(row[7]) < 0.999                                     # thousandth ratio fails
    assert "Relative error is greater than 0.001, consider as error" in row[22]
    assert "标杆比对法 (benchmark)" in row[22]
    assert float(row[14]) > 1e-3 and row[15:18] == [" ", " ", " "]  # benchmark columns, not absolute threshold


def test_real_data_tensor_mix(tmp_path, tensor_mix, capsys):
    target, _ = tensor_mix
    code, out = _run(tmp_path, api_info=target)
    assert code == 0
    result, details = _results(out)
    rows = {row[0]: tuple(row[1:3]) for row in result[1:]}
    assert len(rows) == 302
    assert rows.pop("Functional.linear.2") == ("warning", "pass")
    assert set(rows.values()) == {("pass", " "), ("pass", "pass")}
    assert "real-data inputs" in capsys.readouterr().out
    # the dumped input of embedding is used as is: its output equals the dumped output exactly
    emb = next(r for r in details if r[0] == "Functional.embedding.0.forward.output.0")
    assert emb[1:4] == ["torch.float64", "torch.float32", "(2, 4, 16)"] and emb[5] == "0.00000000000000"


def test_real_data_missing_tensor_file(tmp_path, tensor_mix, capsys):
    source = os.path.dirname(tensor_mix[0])
    copy = tmp_path / "dump"
    shutil.copytree(source, copy)
    os.unlink(copy / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt")
    code, out = _run(tmp_path, api_info=copy / "dump.json")
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("msprobe acc_check: error: real-data mode: 1 tensor file(s)")
    assert "Functional.gelu.0.forward.input.0.pt" in err
    assert not out.exists()


def test_save_error_data_keeps_args_and_kwargs_apart(tmp_path, monkeypatch):
    original = torch.nn.functional.gelu
    monkeypatch.setattr(torch.nn.functional, "gelu", lambda *a, **k: original(*a, **k) + 1e-2)
    code, out = _run(tmp_path, "-save_error_data")
    assert code == 0
    (error_dir,) = out.glob("ut_error_data*")
    names = sorted(p.name for p in error_dir.glob("Functional.gelu.0.*"))
    assert "Functional.gelu.0.forward.input.0.pt" in names
    assert "Functional.gelu.0.forward.output.bench.0.pt" in names
    assert "Functional.gelu.0.forward.output.device.0.pt" in names
    bench = torch.load(error_dir / "Functional.gelu.0.forward.output.bench.0.pt")
    device = torch.load(error_dir / "Functional.gelu.0.forward.output.device.0.pt")
    assert bench.dtype == torch.float64 and device.dtype == torch.float32
    assert float((device.double() - bench).abs().max()) == pytest.approx(1e-2, rel=1e-4)
    assert not list(error_dir.glob("Functional.linear.0.*"))   # passing APIs are not saved


def _dump_copy(tmp_path, names: int) -> str:
    content = json.loads(L1.read_text())
    keys = [k for k in content["data"] if k.endswith(".forward")][:names]
    content["data"] = {k: content["data"][k] for k in keys}
    path = tmp_path / f"dump{names}" / "dump.json"
    path.parent.mkdir()
    path.write_text(json.dumps(content))
    return str(path)


def test_resume_appends_missing_apis_only(tmp_path, capsys):
    code, out = _run(tmp_path)
    assert code == 0
    # a run killed after 100 APIs, in the middle of writing the details of API 101
    result_path, details_path, full_result, full_details = kill_acc_check_run(out, 100, b",torch.float64")
    capsys.readouterr()
    code = run_cli(["acc_check", "-api_info", L1, "-csv_path", result_path])
    assert code == 0
    assert "302 APIs checked" not in capsys.readouterr().out
    assert result_path.read_bytes() == full_result
    assert details_path.read_bytes() == full_details


def test_resume_rejects_other_dump_and_corrupt_csv(tmp_path, capsys):
    small = _dump_copy(tmp_path, 5)
    code, out = _run(tmp_path)
    assert code == 0
    result_path = only_file(out, "accuracy_checking_result_*.csv")
    before = result_path.read_bytes()
    capsys.readouterr()
    assert run_cli(["acc_check", "-api_info", small, "-csv_path", result_path]) == 1
    err = capsys.readouterr().err
    assert "msprobe acc_check: error: the result csv" in err and "belongs to another dump: 297 of its APIs" in err
    assert result_path.read_bytes() == before
    result_path.write_bytes(b"garbage,header\r\nx\r\n")
    assert run_cli(["acc_check", "-api_info", L1, "-csv_path", result_path]) == 1
    assert "is corrupt or not an acc_check file" in capsys.readouterr().err
    assert result_path.read_bytes() == b"garbage,header\r\nx\r\n"
    renamed = result_path.with_name("results.csv")
    result_path.rename(renamed)
    assert run_cli(["acc_check", "-api_info", L1, "-csv_path", renamed]) == 1
    assert "please do not modify the result csv name" in capsys.readouterr().err


def test_bad_dumps(tmp_path, capsys):
    content, no_framework = without_framework(L1, tmp_path)
    assert run_cli(["acc_check", "-api_info", no_framework, "-o", tmp_path / "o1"]) == 1
    assert capsys.readouterr().err == f'msprobe acc_check: error: Key "framework" not found in {no_framework}\n'
    assert run_cli(["acc_check", "-api_info", L0, "-o", tmp_path / "o2"]) == 1
    err = capsys.readouterr().err
    assert "holds no API entries (level 'L0'); acc_check needs an L1 or mix dump." in err
    content["framework"] = "paddle"
    no_framework.write_text(json.dumps(content))
    assert run_cli(["acc_check", "-api_info", no_framework, "-o", tmp_path / "o3"]) == 1
    assert "Unsupported framework in api_info: paddle" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_no_abbreviated_options(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["acc_check", "-api", L1, "-o", tmp_path / "o"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: -api_info/--api_info_file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_unsupported_apis_are_listed(tmp_path):
    content = json.loads(L1.read_text())
    content["data"] = {"Distributed.all_reduce.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
                       "Torch.empty.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
                       "Torch.no_such_api.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
                       "Torch.matmul.0.forward": content["data"]["Torch.matmul.0.forward"]}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(content))
    code, out = _run(tmp_path, api_info=path)
    assert code == 0
    result, details = _results(out)
    assert result[1:] == [
        ["Distributed.all_reduce.0", "SKIP", "SKIP", "API Distributed.all_reduce.0 not support for acc_check. SKIP."],
        ["Torch.empty.0", "SKIP", "SKIP", "API empty in black list or not in white list. SKIP."],
        ["Torch.no_such_api.0", "SKIP", "SKIP", "API Torch.no_such_api.0 not support for acc_check. SKIP."],
        ["Torch.matmul.0", "pass", " "]]
    assert details[1][0] == "Distributed.all_reduce.0.forward.output.0" and details[1][21:] == [
        "SKIP", "API Distributed.all_reduce.0 not support for acc_check. SKIP."]


def test_filter_api_keeps_first_of_equal_calls(tmp_path, capsys):
    code, out = _run(tmp_path, "-f")
    assert code == 0
    result, _ = _results(out)
    names = [row[0] for row in result[1:]]
    # spec §5.2: equal input_kwargs and tensor records apart from Max/Min -> only the first call is checked
    assert len(names) == 244 and names[0] == "Functional.embedding.0"
    content = json.loads(L1.read_text())["data"]
    dropped = [n[: -len(".forward")] for n in content if n.endswith(".forward")
               and n[: -len(".forward")] not in set(names)]
    assert len(dropped) == 58
    for name in dropped:   # each dropped call has an earlier kept twin of the same API
        base = name.rsplit(".", 1)[0]
        record = content[f"{name}.forward"]

        def strip(rec):
            return rec.get("input_kwargs"), [{k: v for k, v in a.items() if k not in ("Max", "Min")}
                                             for a in rec.get("input_args") or [] if isinstance(a, dict)]

        assert any(strip(content[f"{k}.forward"]) == strip(record) for k in names if k.rsplit(".", 1)[0] == base)
    assert "58 dropped by -f" in capsys.readouterr().out


def test_config_white_and_black_lists(tmp_path, capsys, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "acc_check": {"white_list": ["matmul", "gelu"],
                                                                      "black_list": ["gelu"]}}))
    code, out = _run(tmp_path, "-config", config)
    assert code == 0
    rows = {row[0]: row[1:] for row in _results(out)[0][1:]}
    assert rows["Torch.matmul.0"] == ["pass", "pass"]
    assert rows["Functional.gelu.0"] == ["SKIP", "SKIP", "API gelu in black list or not in white list. SKIP."]
    assert rows["Functional.linear.0"] == ["SKIP", "SKIP", "API linear in black list or not in white list. SKIP."]
    assert [n for n, r in rows.items() if r[0] != "SKIP"] == [f"Torch.matmul.{i}" for i in range(4)]
    # the 1.x section name, an error_data_path; bad entries are refused before anything is written
    errors = tmp_path / "errors"
    errors.mkdir()
    config.write_text(json.dumps({"run_ut": {"white_list": ["gelu"], "error_data_path": str(errors)}}))
    original = torch.nn.functional.gelu
    import msprobe.acc_check.runner  # noqa: F401

    monkeypatch.setattr(torch.nn.functional, "gelu", lambda *a, **k: original(*a, **k) + 1e-2)
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "out2", "-config", config, "-save_error_data"]) == 0
    (saved,) = errors.glob("ut_error_data*")
    assert (saved / "Functional.gelu.0.forward.output.device.0.pt").is_file()
    for bad, text in (({"acc_check": {"black_list": ["Torch.matmul.0"]}}, "black_list names 1 API(s) that are not "
                                                                          "PyTorch APIs acc_check knows"),
                      ({"acc_check": {"error_data_path": str(tmp_path / "nowhere")}}, "is not an existing directory"),
                      ({"acc_check": {"white": []}}, "unknown key(s) in the acc_check section: white"),
                      ({"statistics": {}}, 'has no "acc_check" (or 1.x "run_ut") section')):
        config.write_text(json.dumps(bad))
        assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "bad", "-config", config]) == 1
        assert text in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_device_only_and_framework_only_options(tmp_path, capsys):
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "j", "-j"]) == 1
    assert "-j/--jit_compile applies to Ascend NPU only (torch_npu); the device under test here is cpu" in \
        capsys.readouterr().err
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "m", "--max-abs-err", "0.01"]) == 1
    assert "--max-abs-err applies to MindSpore dumps" in capsys.readouterr().err
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "d", "-d", "0", "0"]) == 1
    assert "device ids must be unique: 0 0" in capsys.readouterr().err
    assert not any((tmp_path / name).exists() for name in ("j", "m", "d"))


def test_legacy_run_ut_form(tmp_path, capsys):
    out = tmp_path / "legacy"
    assert run_cli(["-f", "pytorch", "run_ut", "-api_info", L1, "-o", out, "-f"]) == 0   # -f here: filter_api
    assert len(_results(out)[0]) == 1 + 244
    assert run_cli(["-f", "mindspore", "run_ut", "-api_info", L1, "-o", tmp_path / "x"]) == 1
    err = capsys.readouterr().err
    assert "-f mindspore was given (1.x form) but" in err and "is a PyTorch dump; use -f pytorch" in err


def test_mindspore_dump_without_mindspore(tmp_path, capsys):
    try:
        import mindspore  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("mindspore is installed here: tests/acc_check/test_mindspore.py covers MindSpore dumps")
    dump = FIXTURES / "ms_stat_L1_step0" / "dump.json"
    assert run_cli(["acc_check", "-api_info", dump, "-o", tmp_path / "o"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("msprobe acc_check: error: acc_check of a MindSpore dump needs mindspore")
    assert not (tmp_path / "o").exists()
