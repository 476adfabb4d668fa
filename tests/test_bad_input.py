"""Robustness contract of `msprobe compare` on bad input.

Every bad input ends in exactly one clear stderr line `msprobe compare: error: ...` and a non-zero exit
code (or, for a problem of one tensor pair, a successful run whose row says why), never a traceback or a
hang, never an output file or a `.tmp-*` left in the output directory, and never a change to an input file.
Each error case runs in-process (main(argv)) and in a fresh `python -m msprobe` process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers_bad_input import (
    ENTRY,
    MD5_MIX,
    METRIC_COLUMNS,
    STATS_MIX,
    assert_no_output,
    assert_one_error_line,
    assert_outputs,
    assert_success,
    copy_fixture_dump,
    dead_pid,
    default_arrays,
    extract_tensor_fixture,
    file_hashes,
    listing,
    npy_name,
    read_csv_rows,
    rows_with_data_name,
    run_cli,
    run_inproc,
    snapshot,
    stats_dump,
    tensor_record,
    two_step_dumps,
    write_json,
    write_tensor_side,
)

# the same run in this process and as `python -m msprobe` in a fresh one (slow: an interpreter start-up each)
VIA = pytest.mark.parametrize("via", ["inproc", pytest.param("subprocess", marks=pytest.mark.slow)])
HANG_LIMIT = 120  # seconds for one in-process test


@pytest.fixture(autouse=True)
def _fresh_logger_and_alarm():
    """main() installs its log handler once, on the sys.stdout of that moment; drop it around every test so
    that capsys sees the log and no handler writes to a closed capture. Also fail (not hang) after HANG_LIMIT."""
    logger = logging.getLogger("msprobe")

    def clear():
        for handler in list(logger.handlers):
            logger.removeHandler(handler)

    def on_alarm(signum, frame):
        raise TimeoutError(f"test did not finish within {HANG_LIMIT}s (hang)")

    clear()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(HANG_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    clear()


@pytest.fixture
def case(tmp_path, capsys, monkeypatch):
    """Run a compare that must fail: one error line, no output, inputs untouched."""
    monkeypatch.chdir(tmp_path)

    def check(via, tp, gp, *keywords, codes=(1,), extra=(), out=None, inputs=(), fmt="--csv"):
        out = tmp_path / "out" if out is None else out
        watched = [p for p in (tp, gp, *inputs) if os.path.lexists(p)] + [STATS_MIX, MD5_MIX]
        before = snapshot(*watched)
        run = run_cli(via, ["compare", "-tp", tp, "-gp", gp, "-o", out, fmt, *extra], capsys, tmp_path)
        line = assert_one_error_line(run, *keywords, codes=codes)
        if os.path.isdir(out):
            assert_no_output(out)
        assert snapshot(*watched) == before, "an input file changed"
        assert "output" not in listing(tmp_path), "default ./output created although -o was given"
        return line

    return check


@pytest.fixture
def good_pair(tmp_path):
    """Writable copies of the stats_mix dump.json pair."""
    return (copy_fixture_dump(STATS_MIX, "target", tmp_path / "in"),
            copy_fixture_dump(STATS_MIX, "golden", tmp_path / "in"))


# ------------------------------------------------------------------------------------------ 1. missing paths
@VIA
def test_missing_target_path(case, tmp_path, good_pair, via):
    missing = tmp_path / "nowhere" / "dump.json"
    case(via, missing, good_pair[1], "target", "does not exist", str(missing))


@VIA
def test_missing_golden_path(case, tmp_path, good_pair, via):
    missing = tmp_path / "nowhere" / "dump.json"
    case(via, good_pair[0], missing, "golden", "does not exist", str(missing))


# ------------------------------------------------------------------------------------------ 2. dir vs file
def _dir_or_type_message(line: str) -> None:
    assert "directory" in line.lower() or "same type" in line.lower(), line


@VIA
def test_target_is_directory_golden_is_file(case, good_pair, via):
    line = case(via, good_pair[0].parent, good_pair[1], codes=(1, 2))
    _dir_or_type_message(line)


@VIA
def test_target_is_file_golden_is_directory(case, good_pair, via):
    line = case(via, good_pair[0], good_pair[1].parent, codes=(1, 2))
    _dir_or_type_message(line)


@VIA
def test_both_paths_are_directories_without_dumps(case, tmp_path, via):
    """Two directories are a directory compare; with no dump inside there is nothing to compare."""
    (tmp_path / "in" / "t").mkdir(parents=True)
    (tmp_path / "in" / "g").mkdir(parents=True)
    (tmp_path / "in" / "t" / "notes.txt").write_text("not a dump")
    case(via, tmp_path / "in" / "t", tmp_path / "in" / "g", "nothing to compare", codes=(1, 2))


# ------------------------------------------------------------------------------------------ 3. broken JSON
@VIA
@pytest.mark.parametrize("content, words", [
    (b'{"task": "statistics", "data": {,}}', ("not valid json",)),
    (b"{'task': 'statistics'}", ("not valid json",)),
    (b"\xff\xfe\x00garbage\x00", ("not valid json",)),
    (b"", ("is empty",)),
    (b"  \n\t\n", ("is empty",)),
], ids=["bad-syntax", "single-quotes", "binary", "empty", "whitespace-only"])
def test_malformed_json_target(case, tmp_path, good_pair, via, content, words):
    bad = tmp_path / "in" / "bad" / "dump.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(content)
    case(via, bad, good_pair[1], str(bad), *words)


@VIA
@pytest.mark.parametrize("side", ["target", "golden"])
def test_truncated_json(case, good_pair, via, side):
    path = good_pair[0] if side == "target" else good_pair[1]
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    case(via, *good_pair, str(path), "not valid json")


# ------------------------------------------------------------------------------------------ 4. valid JSON, not a dump
@VIA
@pytest.mark.parametrize("content, words", [
    ([{"task": "statistics", "data": {}}], ("not a msprobe dump", "top level")),
    ({"task": "statistics", "level": "L1", "framework": "pytorch"}, ("missing 'data'",)),
    ({"task": "statistics", "framework": "pytorch", "data": ["Functional.add.0.forward"]}, ("'data' must be",)),
    ({"task": "statistics", "framework": "pytorch", "data": "nothing"}, ("'data' must be",)),
    ({"task": "statistics", "framework": "pytorch", "data": None}, ("'data' must be",)),
    ({"framework": "pytorch", "data": {}}, ("'task'",)),
    ({"task": "", "framework": "pytorch", "data": {}}, ("'task'",)),
    ({"task": ["statistics"], "framework": "pytorch", "data": {}}, ("'task'",)),
    ("just a string", ("not a msprobe dump",)),
    (42, ("not a msprobe dump",)),
], ids=["list-top", "no-data", "data-list", "data-str", "data-null", "no-task", "empty-task", "task-list",
        "string-top", "number-top"])
def test_valid_json_not_a_dump(case, tmp_path, good_pair, via, content, words):
    bad = write_json(tmp_path / "in" / "bad" / "dump.json", content)
    case(via, bad, good_pair[1], *words)


@VIA
def test_golden_not_a_dump(case, tmp_path, good_pair, via):
    bad = write_json(tmp_path / "in" / "bad" / "dump.json", {"task": "statistics", "framework": "pytorch"})
    case(via, good_pair[0], bad, str(bad), "missing 'data'")


@VIA
def test_unknown_framework(case, tmp_path, good_pair, via):
    bad = write_json(tmp_path / "in" / "bad" / "dump.json", stats_dump(framework="tensorflow"))
    case(via, bad, good_pair[1], "unknown framework", "tensorflow")


# ------------------------------------------------------------------------------------------ 5. mixed tasks / modes
@VIA
def test_statistics_vs_tensor_task(case, tmp_path, via):
    tensor_dump = extract_tensor_fixture("target", tmp_path / "in")
    case(via, tensor_dump, STATS_MIX / "golden" / "dump.json", "task", "tensor", "statistics")


@VIA
def test_tensor_vs_statistics_task(case, tmp_path, via):
    tensor_dump = extract_tensor_fixture("golden", tmp_path / "in")
    case(via, STATS_MIX / "target" / "dump.json", tensor_dump, "task", "tensor", "statistics")


@VIA
def test_md5_vs_statistics(case, via):
    case(via, MD5_MIX / "target" / "dump.json", STATS_MIX / "golden" / "dump.json", "md5", "statistics")


@VIA
def test_statistics_vs_md5(case, via):
    case(via, STATS_MIX / "target" / "dump.json", MD5_MIX / "golden" / "dump.json", "md5", "statistics")


@VIA
def test_unsupported_task(case, tmp_path, via):
    tp = write_json(tmp_path / "in" / "t" / "dump.json", stats_dump(task="overflow_check"))
    gp = write_json(tmp_path / "in" / "g" / "dump.json", stats_dump(task="overflow_check"))
    case(via, tp, gp, "overflow_check")


# ------------------------------------------------------------------------------------------ 6. unknown dtype
@VIA
def test_unknown_dtype_statistics_still_writes_table(tmp_path, capsys, good_pair, via):
    import json

    tp, gp = good_pair
    for path, both in ((tp, True), (gp, False)):
        content = json.loads(path.read_text())
        entries = list(content["data"].values())
        entries[0]["input_args"][0]["dtype"] = "torch.weird99"            # on both sides
        if both:
            entries[1]["input_args"][0]["dtype"] = "torch.weird99"        # on the target side only
        path.write_text(json.dumps(content))
    before = snapshot(tmp_path / "in")
    out = tmp_path / "out"
    run = run_cli(via, ["compare", "-tp", tp, "-gp", gp, "-o", out, "--csv"], capsys, tmp_path)
    assert_success(run)
    rows = read_csv_rows(assert_outputs(out, "csv"))
    weird = [r for r in rows if r["NPU Dtype"] == "torch.weird99"]
    assert len(weird) == 2, [r["NPU Name"] for r in weird]
    assert weird[0]["Bench Dtype"] == "torch.weird99"
    assert len(rows) > 1000
    assert snapshot(tmp_path / "in") == before


@VIA
def test_unknown_dtype_tensor_still_writes_table(tmp_path, capsys, via):
    name = npy_name("input", 0)
    array = np.arange(1, 5, dtype=np.float32)
    for side in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / side,
                          records={"input.0": tensor_record(name, array, dtype="torch.weird99")})
    run = _run_tensor(tmp_path, capsys, via)
    rows = run["rows"]
    assert len(rows) == 3
    row = rows_with_data_name(rows, name)[0]
    assert row["NPU Dtype"] == row["Bench Dtype"] == "torch.weird99"
    assert float(row["Cosine"]) == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ 7. tensor files
def _run_tensor(tmp_path, capsys, via, extra=()):
    """Compare tmp_path/in/{target,golden}; the run must succeed with a csv table and leave inputs as they were."""
    before = snapshot(tmp_path / "in")
    out = tmp_path / "out"
    run = run_cli(via, ["compare", "-tp", tmp_path / "in" / "target" / "dump.json",
                        "-gp", tmp_path / "in" / "golden" / "dump.json", "-o", out, "--csv", *extra],
                  capsys, tmp_path)
    assert_success(run)
    rows = read_csv_rows(assert_outputs(out, "csv"))
    assert snapshot(tmp_path / "in") == before, "an input file changed"
    return {"run": run, "rows": rows}


def _assert_refused_row(row, *words, cells=("unsupported",)):
    for metric in METRIC_COLUMNS:
        assert row[metric] in cells, (metric, row[metric])
    assert row["Result"] in ("warning", "error"), row["Result"]
    for word in words:
        assert word.lower() in row["Err_message"].lower(), (word, row["Err_message"])


def _other_rows_compared(rows, skip_name):
    """The rows of the other, sound tensors are still compared (a bad tensor does not spoil its neighbours)."""
    others = [r for r in rows if skip_name not in r["Data_name"]]
    assert others
    for row in others:
        assert row["Cosine"] not in ("unsupported", "N/A", "shape unmatched"), row


HOSTILE_NAMES = ["../../etc/passwd", "../outside.npy", "ABSOLUTE"]


def _place_outside_file(tmp_path, side_dir: Path, hostile: str) -> str:
    """Put a readable, valid .npy where the hostile data_name points (so only the name check can stop it)."""
    outside = tmp_path / "outside.npy"
    np.save(outside, np.arange(1, 5, dtype=np.float32))
    np.save(side_dir / "outside.npy", np.arange(1, 5, dtype=np.float32))
    return str(outside) if hostile == "ABSOLUTE" else hostile


@VIA
@pytest.mark.parametrize("hostile", HOSTILE_NAMES, ids=["etc-passwd", "dotdot-npy", "absolute"])
def test_data_name_outside_tensor_dir_both_sides(tmp_path, capsys, via, hostile):
    for side in ("target", "golden"):
        side_dir = tmp_path / "in" / side
        side_dir.mkdir(parents=True)
        data_name = _place_outside_file(tmp_path, side_dir, hostile)
        write_tensor_side(side_dir, records={"input.0": tensor_record(data_name, shape=[4])})
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    bad = rows_with_data_name(rows, data_name)
    assert len(bad) == 1, [r["Data_name"] for r in rows]
    _assert_refused_row(bad[0], "data_name")
    _other_rows_compared(rows, data_name)


@VIA
@pytest.mark.parametrize("hostile", HOSTILE_NAMES, ids=["etc-passwd", "dotdot-npy", "absolute"])
def test_data_name_outside_tensor_dir_target_only(tmp_path, capsys, via, hostile):
    """Only the target dump is tampered with; the row of that tensor must still say what is wrong."""
    write_tensor_side(tmp_path / "in" / "golden")
    side_dir = tmp_path / "in" / "target"
    side_dir.mkdir(parents=True)
    data_name = _place_outside_file(tmp_path, side_dir, hostile)
    write_tensor_side(side_dir, records={"input.0": tensor_record(data_name, shape=[4])})
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    bad = rows_with_data_name(rows, data_name)
    assert len(bad) == 1, [r["Data_name"] for r in rows]
    _assert_refused_row(bad[0], "data_name")


@VIA
@pytest.mark.parametrize("side", ["target", "golden"])
def test_missing_npy(tmp_path, capsys, via, side):
    for s in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / s)
    name = npy_name("input", 1)
    os.unlink(tmp_path / "in" / side / "dump_tensor_data" / name)
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    _assert_refused_row(rows_with_data_name(rows, name)[0], name, "not found")
    _other_rows_compared(rows, name)


@VIA
@pytest.mark.parametrize("keep", ["half-data", "header-cut", "magic-only"])
def test_truncated_npy(tmp_path, capsys, via, keep):
    name = npy_name("output", 0)
    big = {**default_arrays(), name: np.linspace(-3, 3, 1000, dtype=np.float32)}
    for side in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / side, arrays=big)
    path = tmp_path / "in" / "target" / "dump_tensor_data" / name
    raw = path.read_bytes()
    cut = {"half-data": len(raw) - 2000, "header-cut": 40, "magic-only": 6}[keep]
    path.write_bytes(raw[:cut])
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    _assert_refused_row(rows_with_data_name(rows, name)[0], name)
    _other_rows_compared(rows, name)


@VIA
def test_object_array_npy_is_refused_without_unpickling(tmp_path, capsys, via):
    marker = tmp_path / "PICKLE_RAN"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    for side in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / side)
    name = npy_name("input", 0)
    evil = np.empty(4, dtype=object)
    evil[:] = [Payload(), 1, 2, 3]
    np.save(tmp_path / "in" / "target" / "dump_tensor_data" / name, evil, allow_pickle=True)
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    assert not marker.exists(), "the pickle inside the .npy was executed"
    _assert_refused_row(rows_with_data_name(rows, name)[0], name)
    _other_rows_compared(rows, name)


@VIA
def test_symlinked_npy_is_refused(tmp_path, capsys, via):
    for side in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / side)
    name = npy_name("input", 0)
    real = tmp_path / "elsewhere.npy"
    np.save(real, np.arange(1, 5, dtype=np.float32))
    link = tmp_path / "in" / "target" / "dump_tensor_data" / name
    os.unlink(link)
    os.symlink(real, link)
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    _assert_refused_row(rows_with_data_name(rows, name)[0], name, "symbolic link")
    _other_rows_compared(rows, name)


@VIA
def test_shape_mismatch_between_sides(tmp_path, capsys, via):
    name = npy_name("input", 0)
    write_tensor_side(tmp_path / "in" / "target")
    write_tensor_side(tmp_path / "in" / "golden", arrays={**default_arrays(), name: np.arange(1, 6, dtype=np.float32)})
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    row = rows_with_data_name(rows, name)[0]
    assert (row["NPU Tensor Shape"], row["Bench Tensor Shape"]) == ("[4]", "[5]")
    _assert_refused_row(row, "shape", cells=("shape unmatched",))
    _other_rows_compared(rows, name)


@VIA
def test_shape_mismatch_in_files_only(tmp_path, capsys, via):
    """dump.json claims equal shapes, the .npy files disagree: the cells still say so."""
    name = npy_name("input", 0)
    write_tensor_side(tmp_path / "in" / "target")
    golden_arrays = {**default_arrays(), name: np.arange(1, 7, dtype=np.float32).reshape(2, 3)}
    write_tensor_side(tmp_path / "in" / "golden", arrays=golden_arrays,
                      records={"input.0": tensor_record(name, golden_arrays[name], shape=[4])})
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    row = rows_with_data_name(rows, name)[0]
    for metric in METRIC_COLUMNS:
        assert row[metric] == "shape unmatched", (metric, row[metric])


@VIA
def test_nan_at_different_positions(tmp_path, capsys, via):
    name = npy_name("input", 0)
    write_tensor_side(tmp_path / "in" / "target",
                      arrays={**default_arrays(), name: np.array([np.nan, 2, 3, 4], dtype=np.float32)})
    write_tensor_side(tmp_path / "in" / "golden",
                      arrays={**default_arrays(), name: np.array([1, np.nan, 3, 4], dtype=np.float32)})
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    row = rows_with_data_name(rows, name)[0]
    _assert_refused_row(row, "position of inf or nan", cells=("N/A",))
    assert row["Result"] == "error"
    _other_rows_compared(rows, name)


@VIA
def test_tensor_dir_missing_entirely(tmp_path, capsys, via):
    for side in ("target", "golden"):
        write_tensor_side(tmp_path / "in" / side)
    for path in (tmp_path / "in" / "golden" / "dump_tensor_data").iterdir():
        path.unlink()
    (tmp_path / "in" / "golden" / "dump_tensor_data").rmdir()
    rows = _run_tensor(tmp_path, capsys, via)["rows"]
    assert len(rows) == 3
    for row in rows:
        _assert_refused_row(row, "not found")


# ------------------------------------------------------------------------------------------ 8. output dir
@VIA
def test_output_dir_is_a_regular_file(case, tmp_path, good_pair, via):
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me\n")
    case(via, *good_pair, "output", "not a directory", out=blocker, inputs=[blocker])
    assert blocker.read_text() == "keep me\n"


@VIA
def test_output_dir_under_a_regular_file(case, tmp_path, good_pair, via):
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me\n")
    case(via, *good_pair, "output", str(blocker / "sub"), out=blocker / "sub", inputs=[blocker])
    assert blocker.read_text() == "keep me\n" and blocker.is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
@VIA
def test_output_dir_not_writable(case, tmp_path, good_pair, via):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        case(via, *good_pair, "output", "not writable", out=locked)
        assert listing(locked) == []
    finally:
        locked.chmod(0o700)


# ------------------------------------------------------------------------------------------ 9. symlinked input
@VIA
@pytest.mark.parametrize("side", ["target", "golden"])
def test_symlinked_dump_json(case, tmp_path, good_pair, via, side):
    link = tmp_path / "in" / "link" / "dump.json"
    link.parent.mkdir(parents=True)
    os.symlink(good_pair[0] if side == "target" else good_pair[1], link)
    tp, gp = (link, good_pair[1]) if side == "target" else (good_pair[0], link)
    case(via, tp, gp, side, "symbolic link", inputs=[link])
    assert os.path.islink(link)


# ------------------------------------------------------------------------------------------ 10. formulas
FORMULA = "=cmd|' /C calc'!A0"


def _formula_dumps(tmp_path, where: str):
    target, golden = stats_dump(), stats_dump()
    if where == "entry-name":
        target["data"] = {"=HYPERLINK(\"http://evil\").0.forward": target["data"][ENTRY]}
    elif where == "entry-name-plus":
        target["data"] = {"+cmd.0.forward": target["data"][ENTRY]}
    elif where == "str-arg-target":
        target["data"][ENTRY]["input_args"].append({"type": "str", "value": FORMULA})
        golden["data"][ENTRY]["input_args"].append({"type": "str", "value": "ok"})
    elif where == "str-arg-golden":
        target["data"][ENTRY]["input_args"].append({"type": "str", "value": "ok"})
        golden["data"][ENTRY]["input_args"].append({"type": "str", "value": FORMULA})
    elif where == "str-kwarg-semicolon":
        target["data"][ENTRY]["input_kwargs"] = {"mode": {"type": "str", "value": "a;=1+2"}}
    elif where == "dtype":
        target["data"][ENTRY]["input_args"][0]["dtype"] = "=1+2"
        golden["data"][ENTRY]["input_args"][0]["dtype"] = "=1+2"
    tp = write_json(tmp_path / "in" / "target" / "dump.json", target)
    gp = write_json(tmp_path / "in" / "golden" / "dump.json", golden)
    return tp, gp


@VIA
@pytest.mark.parametrize("where", ["entry-name", "entry-name-plus", "str-arg-target", "str-arg-golden",
                                   "str-kwarg-semicolon", "dtype"])
@pytest.mark.parametrize("fmt", ["--csv", "--xlsx"])
def test_formula_like_values(case, tmp_path, via, where, fmt):
    tp, gp = _formula_dumps(tmp_path, where)
    line = case(via, tp, gp, fmt=fmt)
    assert "special characters" in line or "malicious" in line.lower(), line


@VIA
def test_formula_in_stack_json(case, tmp_path, via):
    tp, gp = _formula_dumps(tmp_path, "none")
    write_json(tp.parent / "stack.json", {ENTRY: ["File x.py, line 1", FORMULA]})
    case(via, tp, gp, "stack", "special characters", inputs=[tp.parent / "stack.json"])


# ------------------------------------------------------------------------------------------ 11. hostile structures
def _nested_dump(depth: int) -> str:
    record = '{"type": "mindspore.Tensor", "dtype": "Float32", "shape": [4], "Max": 1, "Min": 0, "Mean": 0.5, "Norm": 1}'
    args = "[" * depth + record + "]" * depth
    return ('{"task": "statistics", "level": "L1", "framework": "mindspore", "data": {"' + ENTRY
            + '": {"input_args": ' + args + ', "output": [' + record + "]}}}")


def _deep_pair(tmp_path, depth):
    tp = tmp_path / "in" / "target" / "dump.json"
    tp.parent.mkdir(parents=True)
    tp.write_text(_nested_dump(depth))
    return tp, write_json(tmp_path / "in" / "golden" / "dump.json", stats_dump())


@VIA
@pytest.mark.parametrize("depth", [401, 450, 5000])
def test_nesting_too_deep(case, tmp_path, via, depth):
    case(via, *_deep_pair(tmp_path, depth), "nested", "400")


def test_nesting_400_is_accepted(tmp_path, capsys):
    """The limit is a limit, not an off-by-one: 399 list levels (depth 400 with the section) still compare."""
    tp, gp = _deep_pair(tmp_path, 399)
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", tmp_path / "out", "--csv", "-c"], capsys)
    assert_success(run)
    assert_outputs(tmp_path / "out", "csv", advisor=False)


@pytest.mark.parametrize("depth", [200_000, 1_000_000])
def test_nesting_hostile_depth_subprocess(case, tmp_path, depth):
    """Hundreds of thousands of levels (a few hundred KB of brackets) must be refused, not crash the parser.
    Subprocess only: a native stack overflow here would kill the test session itself."""
    case("subprocess", *_deep_pair(tmp_path, depth), "nested")


def _with_clean_golden(tmp_path, target: dict) -> tuple:
    """(target, golden) dump.json paths: this target beside an untouched statistics golden."""
    return (write_json(tmp_path / "in" / "target" / "dump.json", target),
            write_json(tmp_path / "in" / "golden" / "dump.json", stats_dump()))


@VIA
@pytest.mark.parametrize("shape", ["4", 4, None, {"0": 4}], ids=["str", "int", "null", "object"])
def test_shape_not_a_list(case, tmp_path, via, shape):
    target = stats_dump()
    target["data"][ENTRY]["input_args"][0]["shape"] = shape
    case(via, *_with_clean_golden(tmp_path, target), "shape", "must be a list")


@VIA
@pytest.mark.parametrize("grad", ["yes", 1, "True"], ids=["yes", "one", "str-True"])
def test_requires_grad_not_bool(case, tmp_path, via, grad):
    target = stats_dump()
    target["data"][ENTRY]["input_args"][0]["requires_grad"] = grad
    case(via, *_with_clean_golden(tmp_path, target), "requires_grad", "true or false")


@VIA
def test_data_name_not_a_string(case, tmp_path, via):
    target = stats_dump()
    target["data"][ENTRY]["input_args"][0]["data_name"] = ["x.npy"]
    case(via, *_with_clean_golden(tmp_path, target), "data_name", "must be a string")


@VIA
def test_entry_body_not_an_object(case, tmp_path, via):
    target = stats_dump()
    target["data"][ENTRY] = "oops"
    case(via, *_with_clean_golden(tmp_path, target), ENTRY, "must be an object")


# ------------------------------------------------------------------------------------------ 12. usage
@VIA
@pytest.mark.parametrize("argv, words", [
    (["compare"], ("required", "-tp", "-gp")),
    (["compare", "-gp", "g.json", "-o", "out"], ("required", "-tp")),
    (["compare", "-tp", "t.json", "-gp", "g.json", "-j", "0"], ("-j", "at least 1")),
    (["compare", "-tp", "t.json", "-gp", "g.json", "--csv", "--xlsx"], ("not allowed",)),
], ids=["no-args", "no-tp", "jobs-zero", "csv-and-xlsx"])
def test_usage_errors(tmp_path, capsys, monkeypatch, via, argv, words):
    monkeypatch.chdir(tmp_path)
    run = run_cli(via, argv, capsys, tmp_path)
    assert run.code == 2
    assert_one_error_line(run, *words, codes=(2,))
    assert listing(tmp_path) == []


def test_version(capsys):
    from msprobe import __version__

    run = run_inproc(["-V"], capsys)
    assert run.code == 0 and run.err == ""
    assert run.out.strip() == f"msprobe {__version__}"


def test_top_level_help(capsys):
    run = run_inproc(["-h"], capsys)
    assert run.code == 0 and run.err == ""
    assert "usage: msprobe" in run.out and "compare" in run.out


def test_compare_help_lists_every_option(capsys):
    run = run_inproc(["compare", "-h"], capsys)
    assert run.code == 0 and run.err == ""
    for option in ("-tp", "--target_path", "-gp", "--golden_path", "-o", "--output_path", "--csv", "--xlsx",
                   "-tensor_log", "-c", "--compare_only", "-s", "--stack_mode", "-j", "--jobs"):
        assert f" {option}" in run.out or f"[{option}" in run.out, option


def test_help_and_version_in_a_subprocess(tmp_path):
    for argv in (["-V"], ["-h"], ["compare", "-h"]):
        proc = subprocess.run([sys.executable, "-m", "msprobe", *argv], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == "", (argv, proc.stderr)
        assert proc.stdout.strip()


# ------------------------------------------------------------------------------------------ 13. runs into one -o
def _tables(out) -> list:
    return sorted(n for n in listing(out) if n.startswith("compare_result_"))


@VIA
def test_another_steps_run_never_takes_or_replaces_the_earlier_results(tmp_path, capsys, monkeypatch, via):
    """issue 18 §3: step0 then step1 into one -o used to replace step0's tables under step0's timestamp."""
    monkeypatch.chdir(tmp_path)
    root = two_step_dumps(tmp_path / "mr")
    out = tmp_path / "seq"

    def compare(step):
        return run_cli(via, ["compare", "-tp", root / "target" / step, "-gp", root / "golden" / step, "-o", out,
                             "--csv", "-j", "2"], capsys, tmp_path)

    assert_success(compare("step0"))
    step0 = file_hashes(out)
    assert len(_tables(out)) == 2
    run = compare("step1")
    assert_success(run)
    assert "(0 from an earlier run" in run.out      # nothing of step0 is taken for step1
    after = file_hashes(out)
    assert {n: after.get(n) for n in step0} == step0     # step0's files are all there, unchanged
    step1 = sorted(set(after) - set(step0))
    assert len([n for n in step1 if n.startswith("compare_result_rank")]) == 2
    stamps = {n.rsplit("_", 1)[1].split(".")[0] for n in after}
    assert len(stamps) == 2                         # each run has its own timestamp
    rows = {n: read_csv_rows(out / n) for n in _tables(out) if "rank0" in n}
    first, second = (rows[n] for n in sorted(rows))
    assert [r["Bench max"] for r in first] != [r["Bench max"] for r in second]   # step1's own data
    # each run keeps its own resume state: step0 again is complete, nothing rewritten
    run = compare("step0")
    assert_success(run)
    assert "2 of 2 tasks were completed by an earlier run" in run.out
    assert file_hashes(out) == after


@VIA
def test_graph_of_another_dump_never_replaces_the_earlier_graphs(tmp_path, capsys, monkeypatch, via):
    monkeypatch.chdir(tmp_path)
    root = two_step_dumps(tmp_path / "mr")
    out = tmp_path / "vis"
    args = ["graph", "-o", out, "-j", "1", "-tp"]
    assert_success(run_cli(via, [*args, root / "target" / "step0"], capsys, tmp_path))
    first = file_hashes(out)
    assert len(first) == 2
    assert_success(run_cli(via, [*args, root / "golden" / "step1"], capsys, tmp_path))
    after = file_hashes(out)
    assert {n: after.get(n) for n in first} == first and len(after) == 4


@VIA
def test_compares_into_one_directory_in_one_second_keep_their_results(tmp_path, capsys, monkeypatch, via, good_pair):
    """Two (sequential, in-process) or four (concurrent processes) compares in the same second: one table each,
    named compare_result_<14 digits>.csv."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    argv = ["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", out, "--csv", "-c"]
    if via == "inproc":
        for _ in range(2):
            assert_success(run_inproc(argv, capsys))
        expected = 2
    else:
        env = {k: v for k, v in os.environ.items() if k != "MSPROBE_DEBUG"}
        runs = [subprocess.Popen([sys.executable, "-m", "msprobe", *map(str, argv)], cwd=tmp_path, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        assert all(r.wait(timeout=120) == 0 for r in runs), [r.stderr.read() for r in runs]
        expected = 4
    names = listing(out)
    assert len(names) == expected and all(re.fullmatch(r"compare_result_\d{14}\.csv", n) for n in names), names
    assert all(len(read_csv_rows(out / n)) == len(read_csv_rows(out / names[0])) > 0 for n in names)


def test_a_stamp_that_a_file_or_a_live_run_holds_is_not_taken(tmp_path):
    import time

    from msprobe.io import host_tag
    from msprobe.scale import stamp as stamps

    clock = iter(range(1_800_000_000, 1_800_000_100))
    seconds = [time.strftime("%Y%m%d%H%M%S", time.localtime(1_800_000_000 + i)) for i in range(4)]
    (tmp_path / f"compare_result_{seconds[0]}.csv").write_text("earlier result")
    (tmp_path / stamps.lock_name(seconds[1])).write_text(f"{os.getppid()}@{host_tag()}\n")    # a live run
    (tmp_path / stamps.lock_name(seconds[2])).write_text(f"{dead_pid()}@{host_tag()}\n")      # a killed one
    try:
        assert stamps.claim_stamp([str(tmp_path)], now=lambda: float(next(clock))) == seconds[2]
        assert os.path.exists(tmp_path / stamps.lock_name(seconds[2]))
    finally:
        stamps.release_claims()
    assert sorted(listing(tmp_path)) == sorted([f"compare_result_{seconds[0]}.csv", stamps.lock_name(seconds[1])])


# ------------------------------------------------------------------------------------------ 14. killed runs
def _fake_temporaries(directory: Path) -> dict:
    from msprobe.io import host_tag

    directory.mkdir(parents=True, exist_ok=True)
    names = {"dead": f".tmp-0123456789ab-{dead_pid()}@{host_tag()}-compare_result_20260101000000.csv",
             "alive": f".tmp-0123456789ac-{os.getpid()}@{host_tag()}-compare_result_20260101000000.csv",
             "foreign": ".tmp-mine.txt"}
    for name in names.values():
        (directory / name).write_bytes(b"x" * 1000)
        os.utime(directory / name, (1_000_000, 1_000_000))
    names["dead-claim"] = ".msprobe_run_20260101000000.lock"       # a killed run's claim on its timestamp
    (directory / names["dead-claim"]).write_text(f"{dead_pid()}@{host_tag()}\n")
    return names


@VIA
def test_temporaries_of_a_killed_run_are_removed_by_the_next_run(tmp_path, capsys, monkeypatch, via, good_pair):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    names = _fake_temporaries(out)
    assert_success(run_cli(via, ["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", out, "--csv"], capsys,
                           tmp_path))
    left = listing(out)
    assert names["dead"] not in left and names["alive"] in left and names["foreign"] in left
    assert names["dead-claim"] not in left
    # directories: the output and its step folders
    root = two_step_dumps(tmp_path / "mr", ranks=1)
    out2 = tmp_path / "out2"
    names = _fake_temporaries(out2 / "step0")
    assert_success(run_cli(via, ["compare", "-tp", root / "target", "-gp", root / "golden", "-o", out2, "--csv",
                                 "-j", "1"], capsys, tmp_path))
    left = listing(out2 / "step0")
    assert names["dead"] not in left and names["alive"] in left and names["foreign"] in left


@VIA
def test_every_command_removes_the_temporaries_of_killed_runs(tmp_path, capsys, monkeypatch, via):
    """merge_result (any command that prepares an output directory) cleans up as compare does."""
    from helpers_bad_input import FIXTURES

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "merged"
    names = _fake_temporaries(out)
    run = run_cli(via, ["merge_result", "-i", FIXTURES / "merge" / "results", "-o", out, "-config",
                        FIXTURES / "merge" / "merge_config.yaml"], capsys, tmp_path)
    assert run.code == 0, run.err
    left = listing(out)
    assert names["dead"] not in left and names["alive"] in left and names["foreign"] in left


def _children(pid: int) -> set:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their driver on Linux")
def test_workers_die_with_a_driver_killed_by_sigkill(tmp_path):
    import time

    from helpers_bad_input import SUBPROCESS_TIMEOUT

    root = two_step_dumps(tmp_path / "mr", ranks=6)
    # a task that never ends: the driver's workers would run forever once it is gone
    script = ("import sys, time\nimport msprobe.compare.batch as b\n"
              "b.compare_files = lambda *a, **k: time.sleep(600)\n"
              "from msprobe.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    driver = subprocess.Popen([sys.executable, "-c", script, "compare", "-tp", str(root / "target" / "step0"),
                               "-gp", str(root / "golden" / "step0"), "-o", str(tmp_path / "out"), "-j", "2"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set = set()
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        while len(workers := _children(driver.pid)) < 2:
            assert driver.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 20
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if _running(pid)], "workers outlived their driver"
    finally:
        if driver.poll() is None:
            driver.kill()
        for pid in workers:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------ 15. surrogates
def _surrogate_pair(tmp_path) -> tuple:
    """stats_mix with a lone surrogate (JSON `\\ud800`) in an entry name, a string value and a stack line."""
    sides = []
    for side in ("target", "golden"):
        content = json.loads((STATS_MIX / side / "dump.json").read_text())
        entry = content["data"].pop("Functional.linear.0.forward")
        entry["input_args"].append({"type": "str", "value": "a\udc00b"})
        content["data"]["Functional.li\ud800near.0.forward"] = entry
        stack = json.loads((STATS_MIX / side / "stack.json").read_text())
        group = next(iter(stack.values()))
        group[0].append("Functional.li\ud800near.0.forward")
        group[1][0] += " \ud801"
        folder = tmp_path / "sur" / side
        write_json(folder / "stack.json", stack)
        sides.append(write_json(folder / "dump.json", content))
    assert b"\\ud800" in sides[0].read_bytes()
    return tuple(sides)


@VIA
@pytest.mark.parametrize("fmt", ["--csv", "--xlsx"])
def test_lone_surrogates_are_written_escaped(tmp_path, capsys, monkeypatch, via, fmt):
    monkeypatch.chdir(tmp_path)
    target, golden = _surrogate_pair(tmp_path)
    out = tmp_path / "out"
    run = run_cli(via, ["compare", "-tp", target, "-gp", golden, "-o", out, fmt, "--html"], capsys, tmp_path)
    assert_success(run)
    extension = fmt[2:]
    table = next(n for n in listing(out) if n.endswith("." + extension))
    if extension == "csv":
        rows = read_csv_rows(out / table)
    else:
        import openpyxl

        sheet = openpyxl.load_workbook(out / table).active
        header = [c.value for c in sheet[1]]
        rows = [dict(zip(header, (c.value for c in row))) for row in sheet.iter_rows(min_row=2)]
    names = [r["NPU Name"] for r in rows if "near.0.forward" in r["NPU Name"]]
    assert names and all(n.startswith("Functional.li\\ud800near.0.forward.") for n in names), names
    assert any("a\\udc00b" in str(r.get("NPU max")) or "a\\udc00b" in str(r.values()) for r in rows)
    assert any("\\ud801" in str(r.get("NPU_Stack_Info")) for r in rows)
    page = next(n for n in listing(out) if n.endswith(".html"))
    assert "li\\\\ud800near" in (out / page).read_text(encoding="utf-8")    # the JSON text of "li\\ud800near"


# ------------------------------------------------------------------------------------------ 16. 1.x -i paths
@VIA
@pytest.mark.parametrize("command", ["compare", "graph"])
@pytest.mark.parametrize("kind", ["missing", "directory", "symlink"])
def test_legacy_compare_json_path_errors(tmp_path, capsys, monkeypatch, via, command, kind):
    monkeypatch.chdir(tmp_path)
    real = write_json(tmp_path / "real.json", {"npu_path": "a", "bench_path": "b"})
    path = {"missing": "/nonexist.json", "directory": tmp_path / "dir", "symlink": tmp_path / "link.json"}[kind]
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        os.symlink(real, path)
    framework = "pytorch" if command == "graph" else "mindspore"
    run = run_cli(via, ["-f", framework, command, "-i", path, "-o", tmp_path / "X"], capsys, tmp_path)
    words = {"missing": "does not exist", "directory": "is a directory", "symlink": "symbolic link"}[kind]
    assert_one_error_line(run, str(path), words, command=command)
    assert not (tmp_path / "X").exists()


# ------------------------------------------------------------------------------------------ 17. huge csv cells
def _long_stack_results(tmp_path) -> Path:
    """compare's own csv of two ranks whose stack has 3000 frames (a cell above csv's default field limit)."""
    root = two_step_dumps(tmp_path / "deep", ranks=2)
    for rank in (0, 1):
        stack_path = root / "target" / "step0" / f"rank{rank}" / "stack.json"
        stack = json.loads(stack_path.read_text())
        for group in stack.values():
            group[1] = [f"File /site-packages/deep/module_{i}.py, line {i}, in frame_{i}, \n call()"
                        for i in range(3000)]
        stack_path.write_text(json.dumps(stack))
    from msprobe.cli.main import main

    assert main(["compare", "-tp", str(root / "target" / "step0"), "-gp", str(root / "golden" / "step0"), "-o",
                 str(tmp_path / "res"), "--csv", "-c", "-j", "1"]) == 0
    return tmp_path / "res"


@pytest.mark.slow
@VIA
def test_report_and_merge_result_read_cells_above_the_csv_field_limit(tmp_path, capsys, monkeypatch, via):
    import csv

    monkeypatch.chdir(tmp_path)
    results = _long_stack_results(tmp_path)
    tables = sorted(results.glob("compare_result_rank*.csv"))
    assert len(tables) == 2 and tables[0].stat().st_size > 2 * 131072
    monkeypatch.setattr(csv, "field_size_limit", csv.field_size_limit)    # restored after the test
    csv.field_size_limit(131072)                                          # Python's default
    run = run_cli(via, ["report", tables[0], "-o", tmp_path / "pages"], capsys, tmp_path)
    assert_success(run)
    assert len(list((tmp_path / "pages").glob("*.html"))) == 1
    config = tmp_path / "merge.yaml"
    config.write_text("api:\n  - Functional.linear\ncompare_index:\n  - Max diff\n")
    run = run_cli(via, ["merge_result", "-i", results, "-o", tmp_path / "merged", "-config", config], capsys,
                  tmp_path)
    assert_success(run)
    assert len(list((tmp_path / "merged").glob("multi_ranks_compare_merge_*.xlsx"))) == 1


# ------------------------------------------------------------------------------------------ 18. the machine says no
def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    return proc.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB file system (tmpfs; needs root), unmounted afterwards."""
    path = tmp_path / "small"
    if not _mount_tmpfs(path, "size=64k"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


@VIA
@pytest.mark.parametrize("fmt", ["--csv", "--xlsx"])
def test_disk_full_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, via, good_pair, small_disk, fmt):
    monkeypatch.chdir(tmp_path)
    (small_disk / "filler").write_bytes(b"\0" * 40_000)    # what is left cannot hold the table
    out = small_disk / "out"
    run = run_cli(via, ["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", out, fmt], capsys, tmp_path)
    line = assert_one_error_line(run, "No space left on device", "compare_result_")
    assert str(out) in line
    assert listing(out) == []


def test_disk_full_without_a_small_disk(tmp_path, capsys, monkeypatch, good_pair):
    """The same through a write that fails as on a full disk (runs where no tmpfs can be mounted)."""
    import errno
    import io

    from msprobe.table import csv_writer

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_open = open

    def full_open(path, mode="r", *args, **kwargs):
        return Full() if "w" in mode else real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(csv_writer, "open", full_open, raising=False)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    run = run_inproc(["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", out, "--csv"], capsys)
    assert_one_error_line(run, "No space left on device", str(out / "compare_result_"))
    assert listing(out) == []


@VIA
def test_read_only_output_directory(tmp_path, capsys, monkeypatch, via, good_pair):
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "ro"
    if not _mount_tmpfs(locked, "size=64k,ro"):
        pytest.skip("cannot mount a read-only tmpfs here (needs root)")
    try:
        run = run_cli(via, ["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", locked / "out", "--csv"],
                      capsys, tmp_path)
        assert_one_error_line(run, str(locked / "out"))
        assert listing(locked) == []
    finally:
        subprocess.run(["umount", "-l", str(locked)], check=False)


@VIA
def test_file_names_too_long(tmp_path, capsys, monkeypatch, via, good_pair):
    monkeypatch.chdir(tmp_path)
    run = run_cli(via, ["compare", "-tp", good_pair[0], "-gp", good_pair[1], "-o", tmp_path / ("o" * 300), "--csv"],
                  capsys, tmp_path)
    assert_one_error_line(run, "File name too long")
    # a rank folder whose name makes the result's name too long: the rank fails in one line, nothing is left
    rank = "rank1" + "0" * 240
    for side in ("target", "golden"):
        copy_fixture_dump(STATS_MIX, side, tmp_path / "long" / side / "step0")
        os.rename(tmp_path / "long" / side / "step0" / side, tmp_path / "long" / side / "step0" / rank)
    out = tmp_path / "out"
    run = run_cli(via, ["compare", "-tp", tmp_path / "long" / "target" / "step0", "-gp",
                        tmp_path / "long" / "golden" / "step0", "-o", out, "--csv"], capsys, tmp_path)
    assert_one_error_line(run, "File name too long", rank)
    assert [n for n in listing(out) if not n.startswith(".msprobe_done")] == []


# ------------------------------------------------------------------------------------------ 19. retries
@VIA
def test_input_errors_of_a_task_are_not_retried(tmp_path, capsys, monkeypatch, via):
    monkeypatch.chdir(tmp_path)
    root = two_step_dumps(tmp_path / "mr", ranks=2)
    (root / "target" / "step0" / "rank1" / "dump.json").write_text("{not json")
    run = run_cli(via, ["compare", "-tp", root / "target" / "step0", "-gp", root / "golden" / "step0", "-o",
                        tmp_path / "out", "--csv", "-j", "2", "--retries", "3"], capsys, tmp_path)
    assert_success(run)
    assert "retrying" not in run.out and "attempts)" not in run.out
    assert "Ranks: 1 of 2 complete" in run.out and "not valid JSON" in run.out
    # -fm with an empty construct.json: refused at once too
    (root / "target" / "step0" / "rank1" / "dump.json").write_text((STATS_MIX / "target" / "dump.json").read_text())
    (root / "target" / "step0" / "rank1" / "construct.json").write_text("")
    run = run_cli(via, ["compare", "-tp", root / "target" / "step0", "-gp", root / "golden" / "step0", "-o",
                        tmp_path / "out2", "--csv", "-j", "2", "-fm"], capsys, tmp_path)
    assert "retrying" not in run.out and "Ranks: 1 of 2 complete" in run.out, run.out[-3000:]


_FAILING_TASK = ("import sys\nimport msprobe.compare.batch as b\n"
                 "def broken(*args, **kwargs):\n    raise ZeroDivisionError('a bug inside a task')\n"
                 "b.compare_files = broken\nfrom msprobe.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_msprobe_debug_shows_the_traceback_of_an_internal_error_inside_a_task(tmp_path, debug, workers):
    from helpers_bad_input import SUBPROCESS_TIMEOUT

    root = two_step_dumps(tmp_path / "mr", ranks=2)
    env = {k: v for k, v in os.environ.items() if k != "MSPROBE_DEBUG"}
    if debug:
        env["MSPROBE_DEBUG"] = "1"
    proc = subprocess.run([sys.executable, "-c", _FAILING_TASK, "compare", "-tp", str(root / "target" / "step0"),
                           "-gp", str(root / "golden" / "step0"), "-o", str(tmp_path / "out"), "-j", workers],
                          capture_output=True, text=True, env=env, timeout=SUBPROCESS_TIMEOUT)
    assert proc.returncode == 1
    assert "internal error: ZeroDivisionError: a bug inside a task" in proc.stdout + proc.stderr
    assert "retrying" not in proc.stdout
    tracebacks = (proc.stdout + proc.stderr).count("Traceback (most recent call last)")
    assert tracebacks == (2 if debug else 0), proc.stderr
    if debug:
        assert "in broken" in proc.stderr and "[rank0] Traceback" in proc.stderr
