"""Inputs of odd encodings and sizes are read, or refused in one line: configurations nested too deeply or with a byte order
mark, IRs that unpack beyond their limits, csv files not in UTF-8 or with a byte order mark, UTF-16/32 dumps, a NUL in
a path, op_generate inputs it cannot rebuild.

Every case keeps the contract of tests/test_bad_input.py: one error line and a non-zero exit, or a row that says
why; never a traceback, a hang, a half-written output or a changed input.
"""

from __future__ import annotations

import pytest
from helpers_bad_input import (
    assert_outputs,
    assert_success,
    read_csv_rows,
    run_inproc,
    write_json,
)

# main() installs its log handler once, on the sys.stdout of that moment: dropped around every test (conftest)
pytestmark = pytest.mark.usefixtures("fresh_logger")


# ------------------------------------------------------------------ integers longer than Python's int() reads


# ------------------------------------------------------------------ .pt files that would run code


# ------------------------------------------------------------------ a line end inside a name forges no log line


# ------------------------------------------------------------------ invisible characters and very long names


# ------------------------------------------------------------------ JSON configuration files
def _deep_config(path):
    path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    return path


@pytest.mark.parametrize("command", ["acc_check", "op_generate"])
def test_a_configuration_nested_too_deeply_is_one_error_line(tmp_path, capsys, command):
    """A -config (acc_check, multi_acc_check) or config_op.json (op_generate) of 100,000 nested objects was an
    internal error (RecursionError, exit 3); configurations are now read by the dump reader's JSON rule."""
    from helpers_bad_input import STATS_MIX, assert_one_error_line

    config = _deep_config(tmp_path / "config.json")
    argv = (["acc_check", "-api_info", STATS_MIX / "target" / "dump.json", "-o", tmp_path / "out", "-config", config]
            if command == "acc_check" else ["op_generate", "-i", config, "-o", tmp_path])
    run = run_inproc(argv, capsys)
    assert_one_error_line(run, "config.json", "nested too deeply", command=command)


def test_a_configuration_with_a_byte_order_mark_is_read_as_a_dump_is(tmp_path, capsys):
    """dump.json with a UTF-8 byte order mark was read, a -config with one refused ('Unexpected UTF-8 BOM')."""
    from helpers_bad_input import STATS_MIX

    config = tmp_path / "config.json"
    config.write_bytes(b'\xef\xbb\xbf{"acc_check": {"white_list": ["__nothing_matches__"]}}')
    run = run_inproc(["acc_check", "-api_info", STATS_MIX / "target" / "dump.json", "-o", tmp_path / "out",
                      "-config", config], capsys)
    assert "BOM" not in run.err and "__nothing_matches__" in run.err      # the config was read: its list judged


# ------------------------------------------------------------------ code_mapping: an IR that unpacks without end
def _one_line_gzip(path, megabytes: int):
    import gzip

    with gzip.open(path, "wb", compresslevel=1) as handle:
        chunk = b"a" * (1 << 20)
        for _ in range(megabytes):
            handle.write(chunk)
    return path


@pytest.mark.parametrize("limit", ["line", "total"])
def test_an_ir_that_unpacks_beyond_its_limits_is_refused(tmp_path, capsys, monkeypatch, limit):
    """A 13 MB .ir.gz of one 3 GB line took 34 s and 5.9 GB of memory before code_mapping said it was no IR:
    the parser read the line whole. An IR line longer than ir_parser.LONGEST_LINE and an IR that unpacks
    beyond the size limit of .ir files are now refused as soon as they are seen (limits made small here)."""
    from helpers_bad_input import assert_one_error_line

    from msprobe.code_mapping import ir_parser

    if limit == "line":
        monkeypatch.setattr(ir_parser, "LONGEST_LINE", 1 << 20)
        ir = _one_line_gzip(tmp_path / "bomb.ir.gz", 8)
    else:
        monkeypatch.setattr(ir_parser, "UNPACKED_LIMIT", 1 << 20)
        ir = tmp_path / "big.ir.gz"
        import gzip

        with gzip.open(ir, "wt") as handle:
            handle.write("# IR entry: @main\n" + "%1 = x\n" * 400_000)
    npy = tmp_path / "MatMul.Default_net-Net_MatMul-op0.0.0.1.output.0.DefaultFormat.npy"
    import numpy as np

    np.save(npy, np.zeros(4, np.float32))
    run = run_inproc(["code_mapping", "--ir", ir, "--dump_data", npy, "-o", tmp_path / "out"], capsys)
    words = ("line 1", "longer than") if limit == "line" else ("unpacks to more than",)
    assert_one_error_line(run, *words, command="code_mapping")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ------------------------------------------------------------------ csv files: byte order mark, other encodings
_STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
                "Avg Value,L2Norm Value\n")
_STAT_ROW = 'Add,Default/Add-op1,1,0,1,output,0,16,float32,"(4,)",{max},0.0,0.5,1.0\n'


def _kernel_side(root, content: bytes):
    folder = root / "rank_0" / "Net" / "0" / "0"
    folder.mkdir(parents=True)
    (folder / "statistic.csv").write_bytes(content)
    return root


def test_a_kernel_statistic_csv_that_is_not_utf8_is_said_so(tmp_path, capsys):
    """A statistic.csv with a byte that is not UTF-8 was an internal error (UnicodeDecodeError)."""
    good = (_STAT_HEADER + _STAT_ROW.format(max=1.0)).encode()
    tp = _kernel_side(tmp_path / "t", good + b"Add,Default/Add\xff-op2,1,0,1,output,0,16,float32,\"(4,)\",1,0,0,1\n")
    gp = _kernel_side(tmp_path / "g", good)
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", tmp_path / "out", "--csv"], capsys)
    assert run.code == 1 and "internal error" not in run.out + run.err
    assert "statistic.csv is not a UTF-8 csv file" in run.out


def test_csv_files_saved_with_a_byte_order_mark_are_read(tmp_path, capsys):
    """A spreadsheet saves 'CSV UTF-8' with a byte order mark: report refused such a compare result ('no NPU Name
    column') and the kernel compare read its statistic.csv's first column as '\\ufeffOp Type'. Every csv reader
    reads UTF-8 with or without the mark (table/readers.py, open_csv)."""
    from helpers_bad_input import STATS_MIX

    run = run_inproc(["compare", "-tp", STATS_MIX / "target" / "dump.json", "-gp", STATS_MIX / "golden" / "dump.json",
                      "-o", tmp_path / "out", "--csv"], capsys)
    table = assert_outputs(tmp_path / "out", "csv")
    saved = tmp_path / "saved" / "compare_result_rank0_20250101000000.csv"
    saved.parent.mkdir()
    saved.write_bytes(b"\xef\xbb\xbf" + open(table, "rb").read())
    run = run_inproc(["report", saved, "-o", tmp_path / "page"], capsys)
    assert_success(run)
    assert len(list((tmp_path / "page").glob("*.html"))) == 1
    # a kernel statistic.csv with the mark: the row is compared as without it
    tp = _kernel_side(tmp_path / "kt", ("\ufeff" + _STAT_HEADER + _STAT_ROW.format(max=2.0)).encode())
    gp = _kernel_side(tmp_path / "kg", (_STAT_HEADER + _STAT_ROW.format(max=1.0)).encode())
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", tmp_path / "kout", "--csv"], capsys)
    assert_success(run)
    rows = read_csv_rows(next((tmp_path / "kout").glob("compare_result_*.csv")))
    assert [(row["NPU Name"], row["NPU max"], row["Bench max"]) for row in rows] == [
        ("Default/Add-op1.1.output.0", "2.0", "1.0")]


# ------------------------------------------------------------------ a rank folder that is a symbolic link


# ------------------------------------------------------------------ the Python API
def test_api_write_into_a_path_with_a_nul_is_a_path_error(tmp_path):
    """result.write('a\\x00b') raised ValueError ('embedded null byte'), not msprobe's PathError."""
    from helpers_bad_input import STATS_MIX

    import msprobe

    result = msprobe.compare(STATS_MIX / "target" / "dump.json", STATS_MIX / "golden" / "dump.json")
    with pytest.raises(msprobe.PathError, match="NUL"):
        result.write(str(tmp_path / "a\x00b"))


# ------------------------------------------------------------------ op_generate: inputs it cannot rebuild
@pytest.mark.parametrize("field, value, words", [
    ("shape", [-3, 2], "not a list of non-negative integers"),
    ("shape", [10 ** 30], "not a list of non-negative integers"),
    ("shape", ["a"], "not a list of non-negative integers"),
    ("dtype", "torch.evil", "unknown torch dtype"),
    ("dtype", "torch.__class__", "unknown torch dtype"),
], ids=["negative", "huge", "text", "unknown-dtype", "attribute-dtype"])
def test_op_generate_writes_no_script_for_inputs_it_cannot_rebuild(tmp_path, capsys, field, value, words):
    """acc_check skips such an API; op_generate wrote a script for it that failed with a traceback when run
    (RuntimeError 'negative dimension', ValueError, AttributeError: module 'torch' has no attribute 'evil')."""
    from helpers_bad_input import assert_one_error_line

    pytest.importorskip("torch")
    record = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.0, "Min": 0.0,
              "Mean": 0.5, "Norm": 1.0, "requires_grad": False}
    bad = dict(record, **{field: value})
    dump = write_json(tmp_path / "dump.json", {
        "task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
        "data": {"Functional.relu.0.forward": {"input_args": [bad], "input_kwargs": {}, "output": [record]}}})
    config = write_json(tmp_path / "config_op.json", {
        "dump_json_path": str(dump), "api_name": "Functional.relu.0", "extract_api_path": str(tmp_path / "x.json"),
        "propagation": "forward", "data_mode": "random_data", "random_seed": 1, "iter_times": 1})
    (tmp_path / "out").mkdir()
    run = run_inproc(["op_generate", "-i", config, "-o", tmp_path / "out"], capsys)
    assert_one_error_line(run, "Functional.relu.0.forward", words, "no script", command="op_generate")
    assert list((tmp_path / "out").iterdir()) == []


# ------------------------------------------------------------------ a dump saved as UTF-16
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_a_utf16_dump_is_named_as_such(tmp_path, capsys, encoding):
    """A dump.json re-saved as UTF-16 (an editor's 'Unicode') was 'it holds NUL bytes (a sparse or damaged file)'."""
    from helpers_bad_input import STATS_MIX, assert_one_error_line

    text = (STATS_MIX / "golden" / "dump.json").read_text(encoding="utf-8")
    tp = tmp_path / "t" / "dump.json"
    tp.parent.mkdir()
    tp.write_bytes(("\ufeff" if encoding != "utf-16" else "").encode(encoding) + text.encode(encoding))
    run = run_inproc(["compare", "-tp", tp, "-gp", STATS_MIX / "golden" / "dump.json", "-o", tmp_path / "out"],
                     capsys)
    assert_one_error_line(run, "not valid JSON", f"byte order mark of {encoding[:6].upper()}", "save it as UTF-8")
