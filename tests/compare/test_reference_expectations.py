"""Behaviours the reference's own unit tests pin down, checked on inputs of our own (issue 32)."""

from __future__ import annotations

import json

from msprobe.dump.reader import infer_framework, read_dump

from conftest import only_file, read_csv, run_cli


def _tensor(framework: str, dtype: str, value: float) -> dict:
    kind = "mindspore.Tensor" if framework == "mindspore" else "torch.Tensor"
    return {"type": kind, "dtype": dtype, "shape": [2, 3], "Max": value, "Min": -value, "Mean": value / 10,
            "Norm": value * 2}


def _write(path, data: dict, framework: str | None) -> str:
    content = {"task": "statistics", "level": "L1", "dump_data_dir": None, "data": data}
    if framework:
        content["framework"] = framework
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content), encoding="utf-8")
    return str(path)


def _rows(directory) -> list:
    table = read_csv(only_file(directory, "compare_result_*.csv"))
    header = table[0]
    return [dict(zip(header, row)) for row in table[1:]]


def test_a_dump_without_framework_is_known_by_its_tensor_types(tmp_path):
    # older collectors wrote no 'framework': the record types say which framework wrote the dump
    ms = {"Mint.add.0.forward": {"input_args": [None, {"type": "mindspore.dtype", "value": "Float32"}],
                                 "output": [_tensor("mindspore", "Float32", 1.0)]}}
    pt = {"Torch.add.0.forward": {"input_args": [{"type": "int", "value": 1}, _tensor("pytorch", "torch.float32", 1.0)],
                                  "output": []}}
    assert infer_framework(ms) == "mindspore"
    assert infer_framework(pt) == "pytorch"
    assert infer_framework({"Torch.add.0.forward": {"input_args": [{"type": "int", "value": 1}]}}) is None
    assert read_dump(_write(tmp_path / "ms" / "dump.json", ms, None), "target").framework == "mindspore"
    assert read_dump(_write(tmp_path / "pt" / "dump.json", pt, None), "golden").framework == "pytorch"
    # a recorded 'framework' wins over the types
    assert read_dump(_write(tmp_path / "x" / "dump.json", ms, "mindtorch"), "target").framework == "mindtorch"


def test_api_mapping_works_on_mindspore_dumps_without_framework(tmp_path):
    # before: "-am and -lm map MindSpore names to PyTorch names: the target dump must be a MindSpore dump"
    ms = {"Mint.add.0.forward": {"input_args": [_tensor("mindspore", "Float32", 1.0)] * 2,
                                 "output": [_tensor("mindspore", "Float32", 2.0)]}}
    pt = {"Torch.add.0.forward": {"input_args": [_tensor("pytorch", "torch.float32", 1.0)] * 2,
                                  "output": [_tensor("pytorch", "torch.float32", 2.0)]}}
    target = _write(tmp_path / "ms" / "dump.json", ms, None)
    golden = _write(tmp_path / "pt" / "dump.json", pt, None)
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-am", "-o", out, "--csv", "-c"]) == 0
    rows = _rows(out)
    assert [(r["NPU Name"], r["Bench Name"], r["Result"]) for r in rows] == [
        (f"Mint.add.0.forward.{k}", f"Torch.add.0.forward.{k}", "pass") for k in ("input.0", "input.1", "output.0")]
