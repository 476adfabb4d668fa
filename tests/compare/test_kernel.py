"""Kernel compare of MindSpore static-graph dumps (--rank/--step), npy and statistic.csv modes."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from msprobe.compare.kernel import accuracy, parse_kernel_name, rank_step_of

from conftest import FIXTURES, only_file, read_csv, run_cli
from test_conformance import cells_equal


@pytest.fixture()
def kernel_dump(tmp_path) -> Path:
    with tarfile.open(FIXTURES / "kernel_l2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    return tmp_path / "kernel_l2"


def test_real_kernel_dump_equals_reference(kernel_dump, tmp_path):
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", out, "--rank",
                    "0", "--csv"]) == 0
    ours = read_csv(only_file(out, "compare_result_0_0_*.csv"))
    reference = read_csv(kernel_dump / "reference.csv.gz")
    assert ours[0] == reference[0]
    assert len(ours) == len(reference) == 121
    # the same rows (paths differ by machine); ours in execution order, the reference's in name order
    mine_by_name = {Path(row[0]).name: row for row in ours[1:]}
    assert len(mine_by_name) == 120 and set(mine_by_name) == {Path(row[0]).name for row in reference[1:]}
    for ref in reference[1:]:
        mine = mine_by_name[Path(ref[0]).name]
        assert re.sub(r"\.\d{10,}\.", ".", Path(mine[1]).name) == re.sub(r"\.\d{10,}\.", ".", Path(ref[1]).name)
        for column, a, b in zip(ours[0][2:], ref[2:], mine[2:]):
            assert cells_equal(a, b), (ref[0], column, a, b)
    assert {r[14] for r in ours[1:]} == {"Yes", "", "None"}


def test_differences_dtype_shape_and_missing_files(kernel_dump, tmp_path):
    data = kernel_dump / "golden" / "rank_0" / "Net" / "0" / "0"
    files = sorted(p for p in data.glob("*.npy") if np.load(p).ndim >= 2)
    noisy, reshaped, retyped, removed, both = files[:5]
    np.save(both, np.load(both).reshape(-1).astype(np.float64))
    array = np.load(noisy)
    np.save(noisy, -array)
    np.save(reshaped, np.load(reshaped).reshape(-1))
    np.save(retyped, np.load(retyped).astype(np.float64))
    removed.unlink()
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", out, "--rank",
                    "--csv"]) == 0
    table = read_csv(only_file(out, "*.csv"))
    by_name = {Path(r[0]).name: r for r in table[1:] if r[0]}
    assert by_name[noisy.name][14] == "No"
    # the reference's own texts (issue 28): "Tensor", and "Skipped." after the dtype text only
    assert by_name[reshaped.name][15] == "Shape of NPU and bench Tensor do not match.\n"
    assert by_name[retyped.name][15] == "Dtype of NPU and bench Tensor do not match. Skipped.\n"
    assert by_name[both.name][15] == ("Shape of NPU and bench Tensor do not match.\n"
                                      "Dtype of NPU and bench Tensor do not match. Skipped.\n")
    assert by_name[removed.name][1] == "" and by_name[removed.name][15] == "Dump file not found.\n"


def test_rank_and_step_filters(kernel_dump, tmp_path, capsys):
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", tmp_path,
                    "--rank", "0", "--step", "1"]) == 1
    assert "could be paired" in capsys.readouterr().err
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", tmp_path,
                    "--rank", "x"]) == 1


def write_statistic(directory: Path, rows: list) -> None:
    directory.mkdir(parents=True)
    header = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
              "Avg Value,L2Norm Value")
    (directory / "statistic.csv").write_text(header + "\n" + "\n".join(rows) + "\n")


def test_statistic_mode(tmp_path):
    write_statistic(tmp_path / "t" / "rank_0" / "Net" / "0" / "0", [
        "MatMul,Default_MatMul-op0,0,0,100,output,0,64,float32,\"(4, 4)\",2.0,-1.0,0.5,3.0",
        "Add,Default_Add-op1,0,0,101,input,0,4,int32,(),1,1,1,1"])
    write_statistic(tmp_path / "g" / "rank_0" / "Net" / "0" / "0", [
        "MatMul,Default_MatMul-op0,0,0,200,output,0,64,float32,\"(4, 4)\",1.0,-1.0,0.5,3.0",
        "Add,Default_Add-op1,0,0,201,input,0,4,int32,(),1,1,1,1"])
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    table = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    header = table[0]
    matmul, add = table[1], table[2]           # in execution order (timestamps 100, 101)
    assert matmul[header.index("NPU Tensor Shape")] == "[4, 4]"
    assert matmul[header.index("Max diff")] == "1.0" and matmul[header.index("MaxRelativeErr")] == "100.0%"
    assert matmul[header.index("Accuracy Reached or Not")] == "Yes"   # 1 / (2 + 1e-10) <= 0.5
    assert add[header.index("Err_message")] == "This is type of scalar data, can not compare.\n"


def test_statistic_mode_shape_and_dtype_messages(tmp_path):
    """The statistic.csv kernels name a dtype mismatch with the npy kernels' text, and every problem of a pair."""
    write_statistic(tmp_path / "t" / "rank_0" / "Net" / "0" / "0", [
        "MatMul,Default_MatMul-op0,0,0,100,output,0,64,float32,\"(4, 4)\",2.0,-1.0,0.5,3.0",
        "MatMul,Default_MatMul-op1,0,0,101,output,0,64,float32,\"(4, 4)\",2.0,-1.0,0.5,3.0",
        "MatMul,Default_MatMul-op2,0,0,102,output,0,64,float32,\"(4, 4)\",2.0,-1.0,0.5,3.0"])
    write_statistic(tmp_path / "g" / "rank_0" / "Net" / "0" / "0", [
        "MatMul,Default_MatMul-op0,0,0,200,output,0,64,float16,\"(4, 4)\",2.0,-1.0,0.5,3.0",
        "MatMul,Default_MatMul-op1,0,0,201,output,0,64,float32,\"(16,)\",2.0,-1.0,0.5,3.0",
        "MatMul,Default_MatMul-op2,0,0,202,output,0,64,float16,\"(16,)\",2.0,-1.0,0.5,3.0"])
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    table = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    messages = [row[table[0].index("Err_message")] for row in table[1:]]
    assert messages == ["Dtype of NPU and bench Tensor do not match. Skipped.\n", "Tensor shapes do not match.\n",
                        "Tensor shapes do not match.\nDtype of NPU and bench Tensor do not match. Skipped.\n"]


def test_name_grammar_and_layout():
    assert parse_kernel_name("AddExt.Default_AddExt-op0.0.0.1795261478647185.input.0.DefaultFormat.Float32.npy") == (
        "AddExt", "Default_AddExt-op0", "0", "0", 1795261478647185, "input", 0)
    assert parse_kernel_name("garbage.npy") is None
    assert rank_step_of("/d/rank_3/Net/1/7") == (3, 7)
    assert rank_step_of("/d/20240101/5/model/1/2") == (5, 2)
    assert rank_step_of("/d/rank_0/execution_order") == (-1, -1)


@pytest.mark.parametrize("cosine, max_abs, expected", [
    ("shape unmatched", "x", "Unmatched"), (None, 0.0, "None"), ("N/A", 0.0, "No"), ("unsupported", 0.0, "None"),
    (0.98, 0.01, "No"), (0.95, 0.0005, "Yes"), (0.85, 0.0, "No"), (0.999, 1.5, "No"), (1.0, 0.0, "Yes")])
def test_accuracy_reached(cosine, max_abs, expected):
    assert accuracy(cosine, max_abs) == expected


def test_unreadable_kernel_file_is_a_row_not_a_crash(kernel_dump, tmp_path):
    data = kernel_dump / "target" / "rank_0" / "Net" / "0" / "0"
    victim = sorted(data.glob("*.npy"))[0]
    victim.write_bytes(b"\x93NUMPY garbage")
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", out, "--rank",
                    "0", "--csv"]) == 0
    table = read_csv(only_file(out, "*.csv"))
    (row,) = [r for r in table[1:] if Path(r[0]).name == victim.name]
    assert row[15] == "Dump file is not ndarray.\n" and row[14] == ""
    assert len(table) == 121


def test_kernel_dump_without_rank_or_step_is_recognised(kernel_dump, tmp_path, capsys):
    """Issue 18: a kernel dump directory given without --rank/--step was "nothing to compare"; the layout is
    recognised and every rank and step compared, as `--rank` alone does."""
    args = ["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "--csv"]
    assert run_cli(args + ["-o", tmp_path / "auto"]) == 0
    assert "MindSpore kernel dumps: every rank and step is compared" in capsys.readouterr().out
    assert run_cli(args + ["-o", tmp_path / "rank", "--rank"]) == 0
    auto, explicit = (read_csv(only_file(tmp_path / d, "compare_result_0_0_*.csv")) for d in ("auto", "rank"))
    assert auto == explicit and len(auto) == 121


def test_a_directory_that_is_no_dump_is_still_nothing_to_compare(tmp_path, capsys):
    for side in ("t", "g"):
        (tmp_path / side / "rank_0" / "Net" / "0" / "0").mkdir(parents=True)
        (tmp_path / side / "rank_0" / "Net" / "0" / "0" / "notes.txt").write_text("x")
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o"]) == 1
    assert "nothing to compare" in capsys.readouterr().err


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4), np.float64(2.5) * np.ones(()), np.zeros((0, 3), np.int64),
    np.array([True, False]), np.arange(6, dtype=np.int8), np.arange(4, dtype=np.uint16), np.ones(3, np.float16),
    np.arange(6.0).reshape(2, 3).T, np.arange(3, dtype=">f4"), np.array([1 + 2j]), np.array(["ab"]),
    np.arange(70000, dtype=np.int32).reshape(7, 10000)])
def test_read_npy_is_np_load(tmp_path, array):
    """The fast .npy reader agrees with np.load (dtype, shape, values), also for a file whose data part is longer
    than its shape (MindSpore's view files: np.load reads the first elements) and for what it leaves to np.load
    (Fortran order, big endian, strings)."""
    from msprobe.compare.kernel import read_npy

    path = tmp_path / "a.npy"
    np.save(path, array)
    for extra in (b"", b"\x01" * 24):
        path.write_bytes(path.read_bytes() + extra)
        got, want = read_npy(str(path)), np.load(path)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


# ---------------------------------------------------------------------------------------------- issue 40
def half_header_file(path: Path, values: np.ndarray) -> None:
    """A kernel file as MindSpore's CPU dump writes a float16 op it ran in float32: a float16 header of the shape,
    then the float32 bytes of the result (twice the data the header declares)."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f2", "fortran_order": False,
                                                      "shape": values.shape})
        handle.write(values.astype("<f4").tobytes())


def npy_dirs(tmp_path: Path, name: str, target, golden, half: bool = False) -> None:
    for side, values in (("t", target), ("g", golden)):
        folder = tmp_path / side / "rank_0" / "Net" / "0" / "0"
        folder.mkdir(parents=True, exist_ok=True)
        if half:
            half_header_file(folder / name, values)
        else:
            np.save(folder / name, values)


MATMUL_OUT = "MatMul.Default_fc-Dense_MatMul-op0.0.0.100.output.0.DefaultFormat.Float16.npy"


def test_a_float16_header_over_float32_data_is_read_as_the_float32_result(tmp_path):
    """Issue 40: MindSpore's CPU dump writes an fp16 MatMul's output as the float32 result of its fp32 kernel under
    a float16 header; read as float16 (np.load) its bytes are NaN and 27360-like garbage. The values are the
    float32 ones, and the row says why."""
    values = np.array([[-0.03077, 0.04016, 0.30427, 0.18488, 0.14726],
                       [-0.07172, 0.19844, 0.31667, 0.14797, 0.14982]], np.float32)
    npy_dirs(tmp_path, MATMUL_OUT, values, values * 2, half=True)
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    header, row = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    cell = dict(zip(header, row))
    assert (cell["NPU Dtype"], cell["Bench Dtype"]) == ("float16", "float16")
    assert float(cell["NPU max"]) == pytest.approx(0.31667) and float(cell["Bench max"]) == pytest.approx(0.63334)
    assert float(cell["NPU min"]) == pytest.approx(-0.07172)
    assert "NPU file holds float32 data under its float16 header" in cell["Err_message"]
    assert "Bench file holds float32 data under its float16 header" in cell["Err_message"]
    assert float(cell["MaxAbsErr"]) == pytest.approx(0.31667, rel=1e-4)      # golden = 2 x target
    assert float(cell["Cosine"]) == pytest.approx(1.0) and cell["Accuracy Reached or Not"] == "Yes"


def test_a_view_file_longer_than_its_header_is_not_a_float32_result(tmp_path):
    """A float32 view saved with its whole storage (three times its data) keeps np.load's reading."""
    folder = tmp_path / "t"
    folder.mkdir()
    from msprobe.compare.kernel import kernel_values

    path = folder / "Reshape.Default_Reshape-op0.0.0.1.input.0.DefaultFormat.Float32.npy"
    np.save(path, np.arange(6, dtype=np.float32).reshape(2, 3))
    path.write_bytes(path.read_bytes() + np.arange(12, dtype=np.float32).tobytes())
    values, half = kernel_values(str(path))
    assert not half and values.dtype == np.float32 and values.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_tensor_holding_nan_is_never_yes(tmp_path):
    """Issue 40: NaN at the same places in both tensors compared the other elements and read "Yes"."""
    values = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    npy_dirs(tmp_path, "Add.Default_Add-op0.0.0.7.output.0.DefaultFormat.Float32.npy", values, values.copy())
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    header, row = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    cell = dict(zip(header, row))
    assert cell["Accuracy Reached or Not"] == "No"
    assert "The NPU tensor holds NaN." in cell["Err_message"] and "The bench tensor holds NaN." in cell["Err_message"]


@pytest.mark.parametrize("target_max, golden_max, messages", [
    ("nan", "nan", ["The NPU tensor holds NaN.\n", "The bench tensor holds NaN.\n"]),
    ("nan", "2.0", ["The NPU tensor holds NaN.\n"]),
    ("2.0", "nan", ["The bench tensor holds NaN.\n"])])
def test_a_statistic_row_holding_nan_is_never_yes(tmp_path, target_max, golden_max, messages):
    """Issue 40: two statistic.csv rows whose Max is NaN read "Yes" (the reference's rule), one NaN read "No"
    without a word."""
    write_statistic(tmp_path / "t" / "rank_0" / "Net" / "0" / "0", [
        f"MatMul,Default_MatMul-op0,0,0,100,output,0,64,float16,\"(4, 4)\",{target_max},-1.0,nan,nan"
        if target_max == "nan" else "MatMul,Default_MatMul-op0,0,0,100,output,0,64,float16,\"(4, 4)\",2.0,-1.0,0.5,3.0"])
    write_statistic(tmp_path / "g" / "rank_0" / "Net" / "0" / "0", [
        f"MatMul,Default_MatMul-op0,0,0,200,output,0,64,float16,\"(4, 4)\",{golden_max},-1.0,nan,nan"
        if golden_max == "nan" else "MatMul,Default_MatMul-op0,0,0,200,output,0,64,float16,\"(4, 4)\",2.0,-1.0,0.5,3.0"])
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    header, row = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    cell = dict(zip(header, row))
    assert cell["Accuracy Reached or Not"] == "No" and cell["Err_message"] == "".join(messages)


def _stamp(name: str) -> int:
    return parse_kernel_name(Path(name).name)[4]


def test_rows_follow_the_execution_order(kernel_dump, tmp_path):
    """Issue 40: the rows were in name order (Default_AddExt-op0 before the GPT's first op): they are in the
    target's execution order, the timestamps MindSpore gives each file as it dumps it (a kernel's inputs, then its
    outputs)."""
    assert run_cli(["compare", "-tp", kernel_dump / "target", "-gp", kernel_dump / "golden", "-o", tmp_path,
                    "--rank", "0", "--csv"]) == 0
    rows = read_csv(only_file(tmp_path, "compare_result_0_0_*.csv"))[1:]
    stamps = [_stamp(row[0]) for row in rows]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps) == 120
    names = [Path(row[0]).name.split(".")[1] for row in rows]
    assert names[0] != "Default_AddExt-op0" and names.index("Default_AddExt-op0") > 0


def test_a_golden_only_tensor_stays_where_the_golden_ran_it(tmp_path):
    """Rows follow the target's order; a tensor only the golden has comes right after the golden's previous paired
    tensor (here between the target's first and second op, although the target's clock says otherwise)."""
    one = np.ones(4, np.float32)
    for side, ops in (("t", [("Mul", "B-op0", 300), ("Add", "C-op0", 100)]),
                      ("g", [("Mul", "B-op0", 10), ("Sub", "Z-op0", 20), ("Add", "C-op0", 30)])):
        folder = tmp_path / side / "rank_0" / "Net" / "0" / "0"
        folder.mkdir(parents=True)
        for op_type, name, stamp in ops:
            np.save(folder / f"{op_type}.{name}.0.0.{stamp}.output.0.DefaultFormat.Float32.npy", one)
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    rows = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))[1:]
    assert [Path(r[0] or r[1]).name.split(".")[1] for r in rows] == ["C-op0", "B-op0", "Z-op0"]


def test_statistic_rows_follow_the_execution_order(tmp_path):
    rows = ["MatMul,Default_MatMul-op0,0,0,50,output,0,64,float32,\"(4, 4)\",2.0,-1.0,0.5,3.0",
            "Add,Default_Add-op1,0,0,100,input,0,64,float32,\"(4, 4)\",1,1,1,1",
            "Add,Default_Add-op1,0,0,100,output,0,64,float32,\"(4, 4)\",1,1,1,1",
            "Add,Default_Add-op1,0,0,100,input,1,64,float32,\"(4, 4)\",1,1,1,1"]
    write_statistic(tmp_path / "t" / "rank_0" / "Net" / "0" / "0", rows)
    write_statistic(tmp_path / "g" / "rank_0" / "Net" / "0" / "0", rows)
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o", "--rank", "0",
                    "--csv"]) == 0
    table = read_csv(only_file(tmp_path / "o", "compare_result_0_0_*.csv"))
    assert [row[0] for row in table[1:]] == ["Default_MatMul-op0.0.output.0", "Default_Add-op1.0.input.0",
                                             "Default_Add-op1.0.input.1", "Default_Add-op1.0.output.0"]
