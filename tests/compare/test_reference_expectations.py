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


def _unary(framework: str, api: str, value: float) -> dict:
    dtype = "Float32" if framework == "mindspore" else "torch.float32"
    return {api: {"input_args": [_tensor(framework, dtype, value)], "input_kwargs": {},
                  "output": [_tensor(framework, dtype, value / 2)]}}


def test_a_function_pytorch_records_under_its_other_name_still_pairs(tmp_path):
    # torch.sigmoid and torch.nn.functional.sigmoid are one function dumped as Torch.sigmoid or Functional.sigmoid;
    # the built-in table names one form, the golden run may have called the other (the reference pairs
    # MindSpore's ops.sigmoid with Functional.sigmoid; our table says Torch.sigmoid, and Functional.softmax)
    ms = {**_unary("mindspore", "Functional.sigmoid.0.forward", 1.0), **_unary("mindspore", "Mint.tanh.0.forward", 2.0),
          **_unary("mindspore", "Functional.softmax.0.forward", 3.0), **_unary("mindspore", "Functional.abs.0.forward", 4.0)}
    pt = {**_unary("pytorch", "Functional.sigmoid.0.forward", 1.0), **_unary("pytorch", "Functional.tanh.0.forward", 2.0),
          **_unary("pytorch", "Torch.softmax.0.forward", 3.0), **_unary("pytorch", "Torch.abs.0.forward", 4.0)}
    target = _write(tmp_path / "ms" / "dump.json", ms, "mindspore")
    golden = _write(tmp_path / "pt" / "dump.json", pt, "pytorch")
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-am", "-o", out, "--csv", "-c"]) == 0
    pairs = {r["NPU Name"]: r["Bench Name"] for r in _rows(out)}
    assert pairs == {
        "Functional.sigmoid.0.forward.input.0": "Functional.sigmoid.0.forward.input.0",
        "Functional.sigmoid.0.forward.output.0": "Functional.sigmoid.0.forward.output.0",
        "Mint.tanh.0.forward.input.0": "Functional.tanh.0.forward.input.0",
        "Mint.tanh.0.forward.output.0": "Functional.tanh.0.forward.output.0",
        "Functional.softmax.0.forward.input.0": "Torch.softmax.0.forward.input.0",
        "Functional.softmax.0.forward.output.0": "Torch.softmax.0.forward.output.0",
        "Functional.abs.0.forward.input.0": "Torch.abs.0.forward.input.0",
        "Functional.abs.0.forward.output.0": "Torch.abs.0.forward.output.0",
    }


def _stats_entry(backward: bool = False) -> dict:
    tensor = _tensor("pytorch", "torch.float32", 1.0)
    return {"input" if backward else "input_args": [tensor], "output": [tensor]}


def test_backward_renumbering_pairs_recomputed_and_unpaired_calls(tmp_path):
    # spec §3.4 / docs/compare.md §4.2: backward call counts are renumbered by order, so a recomputed activation
    # (its forward runs twice, only the second call gets a backward) still pairs its backward
    target = {"Functional.linear.0.forward": _stats_entry(), "Functional.linear.1.forward": _stats_entry(),
              "Functional.linear.1.backward": _stats_entry(True)}
    golden = {"Functional.linear.0.forward": _stats_entry(), "Functional.linear.0.backward": _stats_entry(True)}
    # and calls whose forwards pair on neither side (other call counts) pair their backwards by order
    target.update({"Functional.gelu.5.forward": _stats_entry(), "Functional.gelu.6.forward": _stats_entry(),
                   "Functional.gelu.5.backward": _stats_entry(True), "Functional.gelu.6.backward": _stats_entry(True)})
    golden.update({"Functional.gelu.0.forward": _stats_entry(), "Functional.gelu.1.forward": _stats_entry(),
                   "Functional.gelu.0.backward": _stats_entry(True), "Functional.gelu.1.backward": _stats_entry(True)})
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", _write(tmp_path / "t" / "dump.json", target, "pytorch"),
                    "-gp", _write(tmp_path / "g" / "dump.json", golden, "pytorch"), "-o", out, "--csv", "-c"]) == 0
    pairs = {r["NPU Name"]: r["Bench Name"] for r in _rows(out)}
    assert pairs["Functional.linear.1.forward.input.0"] == "N/A"
    assert pairs["Functional.linear.1.backward.input.0"] == "Functional.linear.0.backward.input.0"
    assert pairs["Functional.linear.1.backward.output.0"] == "Functional.linear.0.backward.output.0"
    assert pairs["Functional.gelu.5.forward.output.0"] == "N/A"
    assert pairs["Functional.gelu.5.backward.output.0"] == "Functional.gelu.0.backward.output.0"
    assert pairs["Functional.gelu.6.backward.input.0"] == "Functional.gelu.1.backward.input.0"
