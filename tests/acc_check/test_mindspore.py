"""msprobe acc_check on MindSpore dumps: the refdata MindSpore 2.10 L1 dump (random inputs) and hand-made tensor dumps
(real inputs), tested on the CPU against the MindSpore CPU benchmark in float64 (float32 for half types).

These tests need mindspore, which needs numpy<2 and lives in its own environment (see .ci/run); elsewhere they are
skipped with the reason below."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import (
    FIXTURES,
    device_rows,
    in_dump_order,
    kill_acc_check_run,
    only_file,
    read_csv,
    run_cli,
    without_framework,
)

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore acc_check "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import mint  # noqa: E402

from msprobe.acc_check.registry import MINDSPORE  # noqa: E402

L1 = FIXTURES / "ms_stat_L1_step0" / "dump.json"
RESULT_HEADER = ["API Name", "Forward Test Success", "Backward Test Success", "Message"]
DETAILS_HEADER = ["API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr",
                  "Status", "Message"]
COSINE_ERROR = "cosine similarity is less than threshold: 0.99 "
MAX_ABS_ERROR = "max absolute difference is greater than threshold: 0.0001 "


def _run(tmp_path, *extra, api_info=L1, name="out"):
    out = tmp_path / name
    code = run_cli(["acc_check", "-api_info", api_info, "-o", out, *extra])
    return code, out


def _results(out):
    return (read_csv(only_file(out, "accuracy_checking_result_*.csv")),
            read_csv(only_file(out, "accuracy_checking_details_*.csv")))


def _uniform(low, high, shape, dtype=np.float32):
    """The random input of spec §4.2: numpy seeded with 42 before every tensor, uniform(Min, Max)."""
    return np.random.RandomState(42).uniform(low, high, shape).astype(dtype)


def _metrics(bench, tested):
    """Cosine, MaxAbsErr, MaxRelativeErr of spec §4.4, by hand."""
    b, t = np.asarray(bench, np.float64).ravel(), np.asarray(tested, np.float64).ravel()
    cosine = (1e-8 + np.dot(b, t)) / (1e-8 + np.linalg.norm(b) * np.linalg.norm(t))
    diff = np.abs(b - t)
    return float(cosine), float(diff.max()), float(np.max(diff / (np.abs(b) + (b == 0) * 1e-8)))


def test_mindspore_support_list_is_the_spec():
    from msprobe.acc_check.mindspore.apis import ms_checkable, ms_support_lists

    lists = ms_support_lists()
    assert len(lists["tensor"]) == 59 and {"masked_fill", "reshape", "to", "zero_"} <= lists["tensor"]
    assert lists["functional"] == {"flash_attention_score"}
    assert {"matmul", "add", "split"} <= lists["mint"] and "softmax" in lists["mint_functional"]
    assert ms_checkable("Mint.anything.0.forward") and ms_checkable("MintFunctional.softmax.1.backward")
    assert ms_checkable("Tensor.reshape.3.forward") and not ms_checkable("Tensor.permute.0.forward")
    assert ms_checkable("Functional.flash_attention_score.0.forward") and not ms_checkable("Functional.gelu.0.forward")
    assert not ms_checkable("Primitive.dense.Dense.0.forward") and not ms_checkable("Mint.add.0")


def test_refdata_l1_dump_random_data(tmp_path, capsys):
    code, out = _run(tmp_path)
    assert code == 0
    result, details = _results(out)
    assert result[0] == ["\ufeff" + RESULT_HEADER[0], *RESULT_HEADER[1:]]
    assert details[0] == ["\ufeff" + DETAILS_HEADER[0], *DETAILS_HEADER[1:]]
    rows = result[1:]
    # the checkable APIs of spec §3.1, in dump order: Mint 14, MintFunctional.softmax 2, Tensor reshape/to 20,
    # masked_fill 2; Tensor.permute/__add__, Functional.gelu/cross_entropy/shape and Primitive.* get no row
    counts = {}
    for row in rows:
        prefix = ".".join(row[0].split(".")[:2])
        counts[prefix] = counts.get(prefix, 0) + 1
    assert counts == {"Tensor.to": 10, "Mint.split": 2, "Tensor.reshape": 10, "Mint.transpose": 2, "Mint.matmul": 4,
                      "Mint.mul": 2, "Tensor.masked_fill": 2, "MintFunctional.softmax": 2, "Mint.add": 4}
    assert rows[:3] == [["Tensor.to.0", "pass", "pass", ""], ["Tensor.to.1", "pass", "pass", ""],
                        ["Mint.split.0", "pass", "pass", ""]]
    # Tensor.reshape.9 has no backward record: an empty cell
    assert ["Tensor.reshape.9", "pass", "", ""] in rows
    assert {tuple(r[1:]) for r in rows} == {("pass", "pass", ""), ("pass", "", "")}
    printed = capsys.readouterr().out
    assert "38 APIs checked of 38 supported (82 forward APIs in the dump), 38 passed, 0 with warnings, 0 failed, 0 skipped" in printed
    # the figures docs/acc_check.md quotes for this run
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "acc_check.md").read_text(encoding="utf-8").split())
    (quoted,) = re.findall(r"\(`tests/fixtures/ms_stat_L1_step0`, (\d+) entries, (\d+) forward\): (\d+) APIs are "
                           r"checked \(.*?; (\d+) with backward\), all pass", doc)
    entries = json.loads(L1.read_text(encoding="utf-8"))["data"]
    assert tuple(int(n) for n in quoted) == (len(entries), 82, len(rows), sum(r[2] == "pass" for r in rows))
    info = json.loads(only_file(out, "accuracy_checking_info_*.json").read_text())
    assert info["runs"][0]["device"] == "cpu" and "MindSpore (float64" in info["runs"][0]["benchmark"]
    by_name = {row[0]: row for row in details[1:]}
    # one row per output: forward 38 APIs + 2 more outputs of each split; backward 37 records + a second gradient
    # of each matmul and add
    assert len(details) - 1 == (38 + 2 * 2) + (37 + 4 + 4)
    # Mint.mul.0 = x * 0.35355339059327373: forward and the gradient sens * c, float32 against float64 by hand.
    # MindSpore rounds the Python scalar to float32 on both sides (a float64 tensor too).
    c32 = float(np.float32(0.35355339059327373))
    x = _uniform(-0.036674726754426956, 0.03658468648791313, (2, 2, 8, 8))
    row = by_name["Mint.mul.0.forward.output.0"]
    assert row[1:4] == ["Float64", "Float32", "(2, 2, 8, 8)"] and row[7:] == ["pass", ""]
    expected = _metrics(x.astype(np.float64) * c32, x * np.float32(c32))
    assert [float(v) for v in row[4:7]] == pytest.approx(expected, rel=1e-12)
    assert float(row[5]) == pytest.approx(4.644560847033574e-10, rel=1e-12)
    sens = _uniform(-8.002003596629947e-05, 8.00200505182147e-05, (2, 2, 8, 8))
    row = by_name["Mint.mul.0.backward.output.0"]
    assert [float(v) for v in row[4:7]] == pytest.approx(
        _metrics(sens.astype(np.float64) * c32, sens * np.float32(c32)), rel=1e-12)
    # matmul: float32 against the float64 product of the same inputs
    a = _uniform(-0.19583198428153992, 0.2235129028558731, (2, 2, 8, 8))
    b = _uniform(-0.17994235455989838, 0.1428595334291458, (2, 2, 8, 8))
    row = by_name["Mint.matmul.0.forward.output.0"]
    tested = mint.matmul(ms.Tensor(a), ms.Tensor(b)).asnumpy()
    assert [float(v) for v in row[4:7]] == pytest.approx(
        _metrics(np.matmul(a.astype(np.float64), b.astype(np.float64)), tested), rel=1e-9)
    assert 0 < float(row[5]) < 1e-7
    assert by_name["Mint.split.0.forward.output.2"][1:4] == ["Float64", "Float32", "(2, 8, 16)"]
    assert by_name["Tensor.masked_fill.0.backward.output.0"][7] == "pass"   # the Bool mask's gradient is dropped
    assert "Tensor.masked_fill.0.backward.output.1" not in by_name


def test_noise_in_tested_matmul_fails_by_max_abs_err_then_cosine(tmp_path, monkeypatch):
    import msprobe.acc_check.mindspore.runner  # noqa: F401  (the benchmark captured the original mint.matmul)

    original = mint.matmul
    monkeypatch.setattr(mint, "matmul", lambda *a, **k: original(*a, **k) + 1e-3)
    code, out = _run(tmp_path, name="shift")
    assert code == 0
    result, details = _results(out)
    failed = [row for row in result[1:] if row[1] != "pass"]
    # a constant shift has no gradient: the backward (GradOperation over the patched API) still passes
    assert failed == [[f"Mint.matmul.{i}", "error", "pass", MAX_ABS_ERROR] for i in range(4)]
    row = next(r for r in details if r[0] == "Mint.matmul.0.forward.output.0")
    assert row[7:] == ["error", MAX_ABS_ERROR]
    assert float(row[5]) == pytest.approx(1e-3, rel=1e-4) and float(row[4]) > 0.99
    # the threshold is an option (DECISIONS 16): 0.01 lets the same shift pass
    code, out = _run(tmp_path, "--max-abs-err", "0.01", name="loose")
    assert code == 0 and {tuple(r[1:3]) for r in _results(out)[0][1:] if r[0].startswith("Mint.matmul")} == {
        ("pass", "pass")}
    # noise as large as the values: cosine fails too, both texts in order
    generator = np.random.RandomState(0)
    monkeypatch.setattr(mint, "matmul", lambda *a, **k: original(*a, **k) + ms.Tensor(
        generator.normal(0, 0.1, (2, 2, 8, 8)).astype(np.float32)))
    code, out = _run(tmp_path, name="noise")
    result, details = _results(out)
    row = next(r for r in details if r[0] == "Mint.matmul.1.forward.output.0")
    assert float(row[4]) < 0.99 and row[7:] == ["error", COSINE_ERROR + MAX_ABS_ERROR]
    assert next(r for r in result if r[0] == "Mint.matmul.1")[1:] == ["error", "pass", COSINE_ERROR + MAX_ABS_ERROR]


def _write_dump(path, data, task="statistics"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"task": task, "level": "L1", "framework": "mindspore",
                                "dump_data_dir": str(path.parent / "dump_tensor_data") if task == "tensor" else None,
                                "data": data}))
    return path


def _item(dtype, shape, high=1.0, low=-1.0, data_name=None):
    item = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape), "Max": high, "Min": low, "Mean": 0.0,
            "Norm": 1.0}
    if data_name:
        item["data_name"] = data_name
    return item


def test_float16_output_against_float32_benchmark(tmp_path):
    data = {"Mint.mul.0.forward": {"input_args": [_item("Float16", (64,)), _item("Float16", (64,))],
                                   "input_kwargs": {}, "output": [_item("Float16", (64,))]},
            "Mint.mul.0.backward": {"input": [_item("Float16", (64,))], "output": []},
            "Tensor.half.0.forward": {"input_args": [_item("Float32", (8,))], "input_kwargs": {},
                                      "output": [_item("Float16", (8,))]}}
    code, out = _run(tmp_path, api_info=_write_dump(tmp_path / "d" / "dump.json", data))
    assert code == 0
    result, details = _results(out)
    x = _uniform(-1, 1, (64,), np.float16)        # both inputs are drawn with seed 42: x * x
    bench = x.astype(np.float32) * x.astype(np.float32)        # exact in float32
    expected = _metrics(bench, (x * x).astype(np.float16))
    row = details[1]
    assert row[:4] == ["Mint.mul.0.forward.output.0", "Float32", "Float16", "(64,)"]
    assert [float(v) for v in row[4:7]] == pytest.approx(expected, rel=1e-12)
    assert expected[1] > 1e-4 and row[7:] == ["error", MAX_ABS_ERROR]   # float16 rounding exceeds 0.0001
    # backward: d(x*x)/dx of each input = sens * x, float16 against float32, both outputs
    assert [r[0] for r in details[2:4]] == ["Mint.mul.0.backward.output.0", "Mint.mul.0.backward.output.1"]
    # Tensor.half of a float32 input: the benchmark's half() output is float16 too; equal
    assert details[4][:4] == ["Tensor.half.0.forward.output.0", "Float16", "Float16", "(8,)"] and details[4][7] == "pass"
    assert result[1][:2] == ["Mint.mul.0", "error"]
    code, out = _run(tmp_path, "--max-abs-err", "0.001", api_info=tmp_path / "d" / "dump.json", name="loose")
    assert _results(out)[0][1][:2] == ["Mint.mul.0", "pass"]


def _tensor_dump(base, perturb=0.0):
    """A real-data (task tensor) MindSpore dump of matmul (with backward), softmax, reshape and flash attention,
    whose outputs were computed in float32 on the CPU (flash attention: an independent numpy implementation)."""
    tensors = base / "dump_tensor_data"
    tensors.mkdir(parents=True)
    generator = np.random.RandomState(7)

    def item(name, array, dtype=None):
        np.save(tensors / f"{name}.npy", array)
        dtype = dtype or {"float32": "Float32", "float16": "Float16", "int64": "Int64", "bool": "Bool"}[str(array.dtype)]
        return _item(dtype, array.shape, float(array.max()), float(array.min()), f"{name}.npy")

    a = generator.normal(size=(4, 6)).astype(np.float32)
    b = generator.normal(size=(6, 5)).astype(np.float32)
    c = (a @ b).astype(np.float32)
    c[1, 2] += perturb
    g = generator.normal(size=(4, 5)).astype(np.float32)
    s = generator.normal(size=(3, 8)).astype(np.float32)
    e = np.exp(s - s.max(-1, keepdims=True))
    q, k, v = (generator.uniform(-1, 1, (1, 6, 32)).astype(np.float16) for _ in range(3))
    data = {
        "Mint.matmul.0.forward": {"input_args": [item("Mint.matmul.0.forward.input.0", a),
                                                 item("Mint.matmul.0.forward.input.1", b)],
                                  "input_kwargs": {}, "output": [item("Mint.matmul.0.forward.output.0", c)]},
        "Mint.matmul.0.backward": {"input": [item("Mint.matmul.0.backward.input.0", g)],
                                   "output": [item("Mint.matmul.0.backward.output.0", (g @ b.T).astype(np.float32)),
                                              item("Mint.matmul.0.backward.output.1", (a.T @ g).astype(np.float32))]},
        "MintFunctional.softmax.0.forward": {
            "input_args": [item("MintFunctional.softmax.0.forward.input.0", s)],
            "input_kwargs": {"dim": {"type": "int", "value": -1}},
            "output": [item("MintFunctional.softmax.0.forward.output.0", (e / e.sum(-1, keepdims=True)))]},
        "Tensor.reshape.0.forward": {"input_args": [item("Tensor.reshape.0.forward.input.0", s),
                                                    {"type": "int", "value": 4}, {"type": "int", "value": 6}],
                                     "input_kwargs": {}, "output": [item("Tensor.reshape.0.forward.output.0",
                                                                         s.reshape(4, 6))]},
        "Functional.flash_attention_score.0.forward": {
            "input_args": [item(f"Functional.flash_attention_score.0.forward.input.{i}", t)
                           for i, t in enumerate((q, k, v))] + [{"type": "int", "value": 2}],
            "input_kwargs": {"scalar_value": {"type": "float", "value": 0.25},
                             "input_layout": {"type": "str", "value": "BSH"}, "sparse_mode": {"type": "int", "value": 2}},
            "output": [item("Functional.flash_attention_score.0.forward.output.0",
                            _attention(q, k, v, 2, 0.25, causal=True))]},
    }
    return _write_dump(base / "dump.json", data, task="tensor")


def _attention(q, k, v, heads, scale, causal):
    """Multi-head attention of BSH tensors in numpy float32 (the flash attention reference, written apart)."""
    b, s, h = q.shape
    d = h // heads

    def split(t):
        return t.astype(np.float32).reshape(b, s, heads, d).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * np.float32(scale)
    if causal:
        scores = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, scores)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    out = (e / e.sum(-1, keepdims=True)) @ split(v)
    return out.transpose(0, 2, 1, 3).reshape(b, s, h).astype(np.float32)


def test_real_data_dump_uses_dumped_outputs(tmp_path, capsys):
    dump = _tensor_dump(tmp_path / "real")
    code, out = _run(tmp_path, "-save_error_data", api_info=dump)
    assert code == 0
    result, details = _results(out)
    assert result[1:] == [["Mint.matmul.0", "pass", "pass", ""], ["MintFunctional.softmax.0", "pass", "", ""],
                          ["Tensor.reshape.0", "pass", "", ""], ["Functional.flash_attention_score.0", "pass", "", ""]]
    printed = capsys.readouterr().out
    assert "real-data inputs" in printed and "does not save error data" in printed
    by_name = {row[0]: row for row in details[1:]}
    # the flash attention benchmark (MindSpore CPU reference, float32 for float16 inputs) against numpy float32
    row = by_name["Functional.flash_attention_score.0.forward.output.0"]
    assert row[1:4] == ["Float32", "Float32", "(1, 6, 32)"] and float(row[5]) < 1e-6
    assert by_name["Mint.matmul.0.backward.output.1"][1:4] == ["Float64", "Float32", "(6, 5)"]
    assert not list(out.glob("ut_error_data*"))
    # one element of the dumped matmul output off by 0.001: that output fails, named by MaxAbsErr
    dump = _tensor_dump(tmp_path / "perturbed", perturb=1e-3)
    code, out = _run(tmp_path, api_info=dump, name="out2")
    result, details = _results(out)
    assert result[1] == ["Mint.matmul.0", "error", "pass", MAX_ABS_ERROR]
    assert float(details[1][5]) == pytest.approx(1e-3, rel=1e-3)


def test_flash_attention_reference_matches_numpy():
    from msprobe.acc_check.mindspore.reference import flash_attention_score

    generator = np.random.RandomState(3)
    q = generator.normal(size=(2, 4, 5, 8))              # BNSD, 4 query heads
    kv = generator.normal(size=(2, 2, 7, 8))             # 2 key/value heads (GQA)
    mask = generator.uniform(size=(2, 1, 5, 7)) > 0.7
    out = flash_attention_score(ms.Tensor(q), ms.Tensor(kv), ms.Tensor(kv), 4, attn_mask=ms.Tensor(mask),
                                scalar_value=0.3, input_layout="BNSD").asnumpy()
    k = np.repeat(kv, 2, axis=1)
    scores = np.where(mask, -np.inf, q @ k.transpose(0, 1, 3, 2) * 0.3)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    assert out.dtype == np.float64 and np.max(np.abs(out - (e / e.sum(-1, keepdims=True)) @ k)) < 1e-12
    # the layouts are views of the same computation
    bsh = generator.normal(size=(3, 2, 5, 16))           # q, k, v as (B, S, H), 2 heads of 8
    expected = flash_attention_score(*(ms.Tensor(t) for t in bsh), 2).asnumpy()
    sbh = flash_attention_score(*(ms.Tensor(t.transpose(1, 0, 2).copy()) for t in bsh), 2, input_layout="SBH")
    bsnd = flash_attention_score(*(ms.Tensor(t.reshape(2, 5, 2, 8)) for t in bsh), 2, input_layout="BSND")
    assert np.array_equal(sbh.asnumpy().transpose(1, 0, 2), expected)
    assert np.array_equal(bsnd.asnumpy().reshape(2, 5, 16), expected)
    with pytest.raises(NotImplementedError, match="keep_prob"):
        flash_attention_score(ms.Tensor(q), ms.Tensor(kv), ms.Tensor(kv), 4, keep_prob=0.9, input_layout="BNSD")


def test_save_error_data_writes_a_replayable_tensor_dump(tmp_path, monkeypatch):
    import msprobe.acc_check.mindspore.runner  # noqa: F401

    original = mint.matmul
    monkeypatch.setattr(mint, "matmul", lambda *a, **k: original(*a, **k) + 1e-3)
    code, out = _run(tmp_path, "-save_error_data")
    assert code == 0
    (error_dir,) = out.glob("ut_error_data*")
    saved = json.loads((error_dir / "dump.json").read_text())
    assert saved["task"] == "tensor" and saved["framework"] == "mindspore"
    assert sorted(saved["data"]) == sorted(f"Mint.matmul.{i}.{d}" for i in range(4) for d in ("forward", "backward"))
    record = saved["data"]["Mint.matmul.0.forward"]
    assert [i["data_name"] for i in record["input_args"]] == ["Mint.matmul.0.forward.input.0.npy",
                                                             "Mint.matmul.0.forward.input.1.npy"]
    tested = np.load(error_dir / "error_data" / "Mint.matmul.0.forward.output.0.npy")
    a = np.load(error_dir / "error_data" / "Mint.matmul.0.forward.input.0.npy")
    assert np.array_equal(a, _uniform(-0.19583198428153992, 0.2235129028558731, (2, 2, 8, 8)))
    assert (error_dir / "stack.json").read_text() == "{}\n"
    assert "Mint.matmul.3: forward error" in (error_dir / "dump_error_info.log").read_text()
    assert tested.shape == (2, 2, 8, 8)
    # the saved dump is a real-data dump: checking it again with the original matmul finds the saved outputs off
    monkeypatch.setattr(mint, "matmul", original)
    code, again = _run(tmp_path, api_info=error_dir / "dump.json", name="again")
    assert code == 0
    assert [row[:3] for row in _results(again)[0][1:]] == [[f"Mint.matmul.{i}", "error", "pass"] for i in range(4)]


def test_resume_continues_and_refuses_foreign_files(tmp_path, capsys):
    code, out = _run(tmp_path)
    assert code == 0
    # killed after 10 APIs, while writing the 11th
    result_path, details_path, full_result, full_details = kill_acc_check_run(out, 10, b",Float64,Flo")
    capsys.readouterr()
    assert run_cli(["acc_check", "-api_info", L1, "-csv_path", result_path]) == 0
    assert "28 APIs checked of 38 supported" in capsys.readouterr().out
    assert result_path.read_bytes() == full_result and details_path.read_bytes() == full_details
    # a PyTorch run's files, a corrupt file, another dump: refused, nothing changed
    torch_result = tmp_path / "pt" / result_path.name
    torch_result.parent.mkdir()
    torch_result.write_bytes("\ufeffAPI name,Forward Test Success,Backward Test Success,Message\r\n".encode())
    (torch_result.parent / details_path.name).write_bytes(b"\xef\xbb\xbfAPI Name\r\n")
    assert run_cli(["acc_check", "-api_info", L1, "-csv_path", torch_result]) == 1
    assert "is the result of a PyTorch dump and this dump.json is a MindSpore dump" in capsys.readouterr().err
    data = json.loads(L1.read_text())
    data["data"] = {k: v for k, v in data["data"].items() if k.startswith("Mint.add.")}
    other = tmp_path / "other" / "dump.json"
    other.parent.mkdir()
    other.write_text(json.dumps(data))
    assert run_cli(["acc_check", "-api_info", other, "-csv_path", result_path]) == 1
    assert "belongs to another dump: 34 of its APIs (first: Tensor.to.0)" in capsys.readouterr().err
    assert result_path.read_bytes() == full_result and details_path.read_bytes() == full_details
    details_path.write_bytes(b"garbage\r\n")
    assert run_cli(["acc_check", "-api_info", L1, "-csv_path", result_path]) == 1
    assert "details csv" in (err := capsys.readouterr().err) and "is corrupt or not an acc_check file" in err
    assert result_path.read_bytes() == full_result and details_path.read_bytes() == b"garbage\r\n"


def test_bad_mindspore_dumps(tmp_path, capsys):
    content, path = without_framework(L1, tmp_path)
    assert run_cli(["acc_check", "-api_info", path, "-o", tmp_path / "o1"]) == 1
    assert capsys.readouterr().err == f'msprobe acc_check: error: Key "framework" not found in {path}\n'
    l0 = _write_dump(tmp_path / "l0" / "dump.json", {"Cell.head.Linear.forward.0": {
        "input_args": [_item("Float32", (2, 16))], "input_kwargs": {}, "output": [_item("Float32", (2, 32))]}})
    assert run_cli(["acc_check", "-api_info", l0, "-o", tmp_path / "o2"]) == 1
    assert "holds no API entries (level 'L1'); acc_check needs an L1 or mix dump." in capsys.readouterr().err
    only_primitives = _write_dump(tmp_path / "prim" / "dump.json", {"Primitive.dense.Dense.0.forward": {
        "input_args": [], "input_kwargs": {}, "output": []}})
    assert run_cli(["acc_check", "-api_info", only_primitives, "-o", tmp_path / "o3"]) == 1
    assert "holds no API that acc_check checks for MindSpore" in capsys.readouterr().err
    content["framework"], content["task"] = "mindspore", "overflow_check"
    path.write_text(json.dumps(content))
    assert run_cli(["acc_check", "-api_info", path, "-o", tmp_path / "o4"]) == 1
    assert "task is 'overflow_check'; acc_check needs 'statistics'" in capsys.readouterr().err
    real = _tensor_dump(tmp_path / "real")
    os.unlink(tmp_path / "real" / "dump_tensor_data" / "Mint.matmul.0.backward.output.1.npy")
    assert run_cli(["acc_check", "-api_info", real, "-o", tmp_path / "o5"]) == 1
    err = capsys.readouterr().err
    assert "real-data mode: 1 tensor file(s)" in err and "Mint.matmul.0.backward.output.1.npy" in err
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "o6", "-j"]) == 1
    assert "-j/--jit_compile applies to PyTorch dumps on Ascend NPU" in capsys.readouterr().err
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 7))


def test_unreplayable_apis_are_skip_rows(tmp_path):
    data = {"Mint.argmax.0.forward": {"input_args": [_item("Float32", (4, 8))],
                                      "input_kwargs": {"dim": {"type": "int", "value": 1}}, "output": []},
            "Mint.no_such_api.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
            "Mint.linalg.vector_norm.0.forward": {"input_args": [], "input_kwargs": {}, "output": []},
            "Mint.add.7.backward": {"input": [_item("Float32", (4,))], "output": []},
            "Mint.add.0.forward": {"input_args": [_item("Float32", (4,)), _item("Float32", (4,), 2.0, 1.0)],
                                   "input_kwargs": {}, "output": [_item("Float32", (4,))]}}
    code, out = _run(tmp_path, api_info=_write_dump(tmp_path / "d" / "dump.json", data))
    assert code == 0
    result, details = _results(out)
    assert result[1:] == [
        # a kernel MindSpore's CPU build lacks; its failure does not leak into the APIs after it
        ["Mint.argmax.0", "SKIP", "", "benchmark run: RuntimeError: The kernel ArgMaxExt unregistered. "],
        ["Mint.no_such_api.0", "SKIP", "", "API Mint.no_such_api.0 not support for acc_check: mindspore.mint has no "
                                           "no_such_api. "],
        ["Mint.linalg.vector_norm.0", "SKIP", "", "API Mint.linalg.vector_norm.0 is not of the form Type.name.N, "
                                                  "acc_check cannot replay it. "],
        ["Mint.add.7", "", "SKIP", "forward info of Mint.add.7 is not found, its backward cannot be replayed. "],
        ["Mint.add.0", "pass", "", ""]]
    assert [row[0] for row in details[1:]] == ["Mint.add.0.forward.output.0"]   # SKIP cells have no details rows


def test_filter_and_config_lists(tmp_path, capsys):
    code, out = _run(tmp_path, "-f")
    assert code == 0
    names = [row[0] for row in _results(out)[0][1:]]
    # -f keeps the first of the calls with equal arguments apart from Max/Min (spec §5.2)
    assert len(names) == 29 and "Tensor.to.2" not in names and "MintFunctional.softmax.1" not in names
    assert "9 dropped by -f" in capsys.readouterr().out
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"task": "statistics", "acc_check": {"black_list": ["matmul", "reshape"]}}))
    code, out = _run(tmp_path, "-config", config, name="black")
    rows = {row[0]: row[1:] for row in _results(out)[0][1:]}
    assert rows["Mint.matmul.0"] == ["SKIP", "SKIP", "API matmul in black list or not in white list. SKIP."]
    assert rows["Tensor.reshape.9"] == ["SKIP", "", "API reshape in black list or not in white list. SKIP."]
    assert rows["Mint.add.0"] == ["pass", "pass", ""]
    config.write_text(json.dumps({"run_ut": {"white_list": ["Mint.add.0"]}}))
    assert run_cli(["acc_check", "-api_info", L1, "-o", tmp_path / "bad", "-config", config]) == 1
    assert "white_list names 1 API(s) that are not MindSpore APIs acc_check knows (first: 'Mint.add.0')" in \
        capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_legacy_run_ut_form(tmp_path, capsys):
    out = tmp_path / "legacy"
    assert run_cli(["-f", "mindspore", "run_ut", "-api_info", L1, "-o", out]) == 0
    assert len(_results(out)[0]) == 39
    assert run_cli(["-f", "pytorch", "run_ut", "-api_info", L1, "-o", tmp_path / "x"]) == 1
    assert "-f pytorch was given (1.x form) but" in capsys.readouterr().err
    assert MINDSPORE.result_header == RESULT_HEADER and MINDSPORE.details_header == DETAILS_HEADER


def test_multi_acc_check_union_equals_single_run(tmp_path, capsys):
    """multi_acc_check of a MindSpore dump through the acc_check engine; the MindSpore environment has no torch."""
    code, single = _run(tmp_path, name="single")
    assert code == 0
    single_rows, single_details = (rows[1:] for rows in _results(single))
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "-n", "4", "-o", tmp_path / "multi"]) == 0
    assert "38 APIs in 4 splits (9 each, the last 11) over 2 devices (0 1)" in capsys.readouterr().out
    per_device = device_rows(tmp_path / "multi")
    assert [len(rows) for rows in per_device] == [9 + 9, 9 + 11]            # splits 0 2 | 1 3
    assert per_device[1][0] == single_rows[9]
    assert in_dump_order(single_rows, per_device) == single_rows
    device_details = device_rows(tmp_path / "multi", kind="details")
    assert len(single_details) == 87 and in_dump_order(single_details, device_details) == single_details
    summary = read_csv(only_file(tmp_path / "multi", "accuracy_checking_summary_*.csv"))
    assert [row[:7] for row in summary[1:]] == [["0", "18", "18", "18", "18", "0", "0"],
                                                ["1", "20", "20", "20", "20", "0", "0"],
                                                ["total", "38", "38", "38", "38", "0", "0"]]
    info = json.loads(only_file(tmp_path / "multi", "accuracy_checking_info_*_device0.json").read_text())
    assert [run["device"] for run in info["runs"]] == ["cpu"] and "MindSpore" in info["runs"][0]["benchmark"]
    assert not list((tmp_path / "multi").glob("*_split*"))
    # -f and -config forwarded: the same rows as acc_check with them
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"acc_check": {"black_list": ["matmul", "reshape"]}}))
    code, single = _run(tmp_path, "-f", "-config", config, name="single_options")
    assert run_cli(["multi_acc_check", "-api_info", L1, "-d", "0", "1", "2", "-n", "3", "-o", tmp_path / "options",
                    "-f", "-config", config]) == 0
    single_rows = _results(single)[0][1:]
    assert len(single_rows) == 29 and single_rows[2] == ["Mint.split.0", "pass", "pass", ""]
    per_device = device_rows(tmp_path / "options", (0, 1, 2))
    assert [len(rows) for rows in per_device] == [9, 9, 11]
    assert in_dump_order(single_rows, per_device) == single_rows
    assert ["Mint.matmul.0", "SKIP", "SKIP", "API matmul in black list or not in white list. SKIP."] in per_device[0]


def _float16_muls(path, count=4):
    """`count` calls of float16 Mint.mul(x, x): float16 rounding gives a max abs error between 0.0001 and 0.001."""
    data = {f"Mint.mul.{i}.forward": {"input_args": [_item("Float16", (64 * (i + 1),)), _item("Float16", (64 * (i + 1),))],
                                      "input_kwargs": {}, "output": [_item("Float16", (64 * (i + 1),))]}
            for i in range(count)}
    return _write_dump(path, data)


def test_multi_acc_check_forwards_max_abs_err_and_save_error_data(tmp_path, capsys):
    dump = _float16_muls(tmp_path / "d" / "dump.json")
    out = tmp_path / "strict"
    assert run_cli(["multi_acc_check", "-api_info", dump, "-d", "0", "1", "-n", "2", "-o", out,
                    "-save_error_data"]) == 0
    rows = device_rows(out)
    assert rows == [[[f"Mint.mul.{i}", "error", "", MAX_ABS_ERROR] for i in (0, 1)],
                    [[f"Mint.mul.{i}", "error", "", MAX_ABS_ERROR] for i in (2, 3)]]
    for row in (r for rows in device_rows(out, kind="details") for r in rows):
        assert 1e-4 < float(row[5]) < 1e-3
    # both splits, running at the same time, added their failing APIs to the run's one error dump
    (saved,) = out.glob("ut_error_data*")
    content = json.loads((saved / "dump.json").read_text())
    assert sorted(content["data"]) == [f"Mint.mul.{i}.forward" for i in range(4)]
    assert len((saved / "dump_error_info.log").read_text().splitlines()) == 4
    tested = np.load(saved / "error_data" / "Mint.mul.3.forward.output.0.npy")
    x = _uniform(-1, 1, (256,), np.float16)
    assert tested.dtype == np.float16 and np.array_equal(tested, x * x)
    # --max-abs-err forwarded: the same outputs pass with 0.001
    assert run_cli(["multi_acc_check", "-api_info", dump, "-d", "0", "1", "-n", "2", "-o", tmp_path / "loose",
                    "--max-abs-err", "0.001"]) == 0
    assert {tuple(row[1:]) for rows in device_rows(tmp_path / "loose") for row in rows} == {("pass", "", "")}
    # refused before anything is written, with one line: -j, a 1.x -f naming the other framework
    assert run_cli(["multi_acc_check", "-api_info", dump, "-o", tmp_path / "j", "-j"]) == 1
    assert "-j/--jit_compile applies to PyTorch dumps on Ascend NPU" in capsys.readouterr().err
    assert run_cli(["-f", "pytorch", "multi_run_ut", "-api_info", dump, "-o", tmp_path / "pt"]) == 1
    assert "-f pytorch was given (1.x form) but" in capsys.readouterr().err
    assert not (tmp_path / "j").exists() and not (tmp_path / "pt").exists()
    assert run_cli(["-f", "mindspore", "multi_run_ut", "-api_info", dump, "-d", "1", "-n", "1", "-o",
                    tmp_path / "legacy"]) == 0
    assert device_rows(tmp_path / "legacy", (1,)) == [rows[0] + rows[1]]


def test_multi_acc_check_real_data(tmp_path, capsys):
    dump = _tensor_dump(tmp_path / "real")
    code, single = _run(tmp_path, api_info=dump, name="single")
    assert code == 0
    single_rows = _results(single)[0][1:]
    assert run_cli(["multi_acc_check", "-api_info", dump, "-d", "0", "1", "-n", "2", "-o", tmp_path / "multi"]) == 0
    per_device = device_rows(tmp_path / "multi")
    assert per_device == [single_rows[:2], single_rows[2:]] and single_rows[0] == ["Mint.matmul.0", "pass", "pass", ""]
    # a tensor file of the dump missing: refused by the driver before any worker starts
    os.unlink(tmp_path / "real" / "dump_tensor_data" / "Tensor.reshape.0.forward.output.0.npy")
    assert run_cli(["multi_acc_check", "-api_info", dump, "-d", "0", "1", "-o", tmp_path / "missing"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("msprobe multi_acc_check: error: real-data mode: 1 tensor file(s)") and \
        "Tensor.reshape.0.forward.output.0.npy" in err
    assert not (tmp_path / "missing").exists()


def test_a_cast_is_judged_by_its_target_dtypes_rounding(tmp_path):
    """Issue 32: Tensor.to(float16) of a float32 input: the benchmark (dtype argument raised) keeps float32's
    values, the tested output is their float16 rounding, MaxAbsErr up to 2**-11 of values near 1; a cast is exact to
    that rounding: pass."""
    data = {"Tensor.to.0.forward": {"input_args": [_item("Float32", (64,), high=2.0, low=0.5),
                                                   {"type": "mindspore.dtype", "value": "Float16"}],
                                    "input_kwargs": {}, "output": [_item("Float16", (64,), high=2.0, low=0.5)]}}
    code, out = _run(tmp_path, api_info=_write_dump(tmp_path / "d" / "dump.json", data))
    assert code == 0
    result, details = _results(out)
    x = _uniform(0.5, 2.0, (64,))
    expected = _metrics(x, x.astype(np.float16))
    row = details[1]
    assert row[0] == "Tensor.to.0.forward.output.0" and row[2] == "Float16"
    assert float(row[5]) == pytest.approx(expected[1], rel=1e-12) and expected[1] > 1e-4
    assert row[7:] == ["pass", ""] and result[1][:2] == ["Tensor.to.0", "pass"]
