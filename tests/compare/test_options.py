"""Smaller compare features: -tensor_log, both stack.json formats, the 1.x kernel form, the advisor file."""

from __future__ import annotations

import json
import shutil

import numpy as np

from msprobe.dump.reader import read_stack

from conftest import FIXTURES, fixture_pair, only_file, read_csv, run_cli


def test_tensor_log_prints_one_line_per_tensor_pair(tmp_path, capsys):
    for side in ("t", "g"):
        folder = tmp_path / side
        (folder / "dump_tensor_data").mkdir(parents=True)
        records = []
        for index in range(3):
            name = f"Functional.add.0.forward.input.{index}.npy"
            np.save(folder / "dump_tensor_data" / name, np.arange(4, dtype=np.float32) + index)
            records.append({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [4], "Max": 3.0 + index,
                            "Min": float(index), "Mean": 1.5 + index, "Norm": 1.0, "data_name": name})
        (folder / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "mindspore",
                                                      "data": {"Functional.add.0.forward": {"input_args": records}}}))
    assert run_cli(["compare", "-tp", tmp_path / "t" / "dump.json", "-gp", tmp_path / "g" / "dump.json", "-o",
                    tmp_path / "o", "-tensor_log", "-c"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "Compare result: Cosine" in line]
    assert len(lines) == 3
    assert "[Functional.add.0.forward.input.0] Compare result: Cosine 1.0, EucDist 0.0" in lines[0]


def test_stack_json_both_formats(tmp_path):
    grouped = {"0": [["A.x.0.forward", "B.y.0.forward"], ["File a.py, line 1, in f, \n x()"]],
               "1": [["C.z.0.forward"], ["File b.py, line 2, in g, \n y()"]]}
    older = {"A.x.0.forward": ["File a.py, line 1, in f, \n x()"]}
    (tmp_path / "grouped.json").write_text(json.dumps(grouped))
    (tmp_path / "older.json").write_text(json.dumps(older))
    stacks = read_stack(str(tmp_path / "grouped.json"))
    assert stacks["B.y.0.forward"] == ["File a.py, line 1, in f, \n x()"] and len(stacks) == 3
    assert read_stack(str(tmp_path / "older.json")) == older


def test_stack_column_and_advisor_file(tmp_path):
    target, golden = fixture_pair("stats_mix_step0")
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--csv"]) == 0
    table = read_csv(only_file(tmp_path, "compare_result_*.csv"))
    stack = table[0].index("NPU_Stack_Info")
    assert table[1][stack].startswith("['File ") and table[2][stack] == "N/A"
    advisor = only_file(tmp_path, "advisor_*.txt").read_text().splitlines()
    # the culprit: the first output where the precision drops (data row 89; its input, data row 86, is the cast's
    # result), named by the row the user opens in the table file (the header is row 1)
    assert advisor[0] == "Line: 90 (the row of the table file; its header is row 1)"
    assert advisor[1] == "Suspect Nodes: Functional.linear.2.forward.output.0"
    assert table[89][0] == "Functional.linear.2.forward.output.0"        # file row 90
    assert advisor[2].startswith("Expert Advice: The two runs use different dtypes")
    # no stack.json beside the target dump: no NPU_Stack_Info column
    shutil.copytree(FIXTURES / "stats_mix_step0" / "target", tmp_path / "nostack")
    (tmp_path / "nostack" / "stack.json").unlink()
    assert run_cli(["compare", "-tp", tmp_path / "nostack" / "dump.json", "-gp", golden, "-o", tmp_path / "o2",
                    "--csv", "-c"]) == 0
    assert "NPU_Stack_Info" not in read_csv(only_file(tmp_path / "o2", "*.csv"))[0]


def test_legacy_kernel_form(tmp_path):
    import tarfile

    with tarfile.open(FIXTURES / "kernel_l2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    config = {"npu_path": str(tmp_path / "kernel_l2" / "target"), "bench_path": str(tmp_path / "kernel_l2" / "golden"),
              "rank_id": [0], "step_id": []}
    (tmp_path / "compare.json").write_text(json.dumps(config))
    assert run_cli(["-f", "mindspore", "compare", "-i", tmp_path / "compare.json", "-o", tmp_path / "o"]) == 0
    only_file(tmp_path / "o", "compare_result_0_0_*.xlsx")
