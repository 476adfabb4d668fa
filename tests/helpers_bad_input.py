"""Shared helpers of tests/test_bad_input.py: run the CLI, build small dumps, check the robustness contract."""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STATS_MIX = FIXTURES / "stats_mix_step0"
MD5_MIX = FIXTURES / "md5_mix_step0"
TENSOR_MIX = FIXTURES / "tensor_mix_step0"
SUBPROCESS_TIMEOUT = 120  # seconds; a compare of these tiny inputs takes well under one
ENTRY = "Functional.add.0.forward"


# ----------------------------------------------------------------------------------------------- running
@dataclass
class Run:
    code: int
    out: str
    err: str


def run_inproc(argv: list, capsys) -> Run:
    """Call msprobe.cli.main.main in this process; argparse exits (SystemExit) become exit codes."""
    from msprobe.cli.main import main

    capsys.readouterr()  # drop anything printed before
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse: -h, -V, usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def run_subprocess(argv: list, cwd) -> Run:
    """`python -m msprobe ...` in a fresh process (no MSPROBE_DEBUG, so no traceback is allowed)."""
    env = {k: v for k, v in os.environ.items() if k != "MSPROBE_DEBUG"}
    env["PYTHONWARNINGS"] = "default"  # a stray Python warning would show on stderr
    proc = subprocess.run([sys.executable, "-m", "msprobe", *[str(a) for a in argv]], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, stdin=subprocess.DEVNULL)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def run_cli(via: str, argv: list, capsys, cwd) -> Run:
    if via == "subprocess":
        return run_subprocess(argv, cwd)
    return run_inproc(argv, capsys)


# ----------------------------------------------------------------------------------------------- checks
def error_lines(err: str) -> list:
    return [line for line in err.splitlines() if line.strip()]


def assert_one_error_line(run: Run, *keywords: str, codes=(1,), command: str = "compare") -> str:
    """Non-zero exit code among `codes`, exactly one non-empty stderr line `msprobe <command>: error: ...`
    holding every keyword (case-insensitive), no traceback, no internal error."""
    assert "Traceback" not in run.err and "Traceback" not in run.out, run.err + run.out
    lines = error_lines(run.err)
    assert len(lines) == 1, f"exit code {run.code}; expected exactly one stderr line, got {len(lines)}:\n{run.err}"
    line = lines[0]
    assert line.startswith(f"msprobe {command}: error: "), line
    assert "internal error" not in line, line
    for word in keywords:
        assert word.lower() in line.lower(), f"{word!r} not in {line!r}"
    assert run.code != 0 and run.code in codes, f"exit code {run.code} not in {codes}: {line}"
    return line


def assert_success(run: Run) -> None:
    """Exit 0 and nothing at all on stderr (no traceback, no warning, no error line)."""
    assert run.code == 0, f"exit code {run.code}\nstderr: {run.err}\nstdout tail: {run.out[-2000:]}"
    assert "Traceback" not in run.out
    assert error_lines(run.err) == [], run.err


def listing(directory) -> list:
    return sorted(os.listdir(directory)) if os.path.lexists(directory) else []


def assert_no_output(out_dir) -> None:
    """No result, no advisor and no .tmp-* left behind (the directory itself may have been created)."""
    if os.path.lexists(out_dir):
        assert os.path.isdir(out_dir) and not os.path.islink(out_dir), out_dir
        assert listing(out_dir) == [], listing(out_dir)


def assert_outputs(out_dir, extension: str, advisor: bool = True) -> str:
    """Exactly compare_result_<ts>.<ext> (+ advisor_<ts>.txt), no temp file; returns the table path."""
    names = listing(out_dir)
    assert not [n for n in names if n.startswith(".tmp-")], names
    tables = [n for n in names if n.startswith("compare_result_") and n.endswith("." + extension)]
    advisors = [n for n in names if n.startswith("advisor_") and n.endswith(".txt")]
    assert len(tables) == 1, names
    assert len(advisors) == (1 if advisor else 0), names
    assert len(names) == len(tables) + len(advisors), names
    assert os.path.getsize(os.path.join(out_dir, tables[0])) > 0
    return os.path.join(out_dir, tables[0])


def read_csv_rows(path) -> list:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def snapshot(*roots) -> dict:
    """Path -> (kind, sha256 or link target, mode) of every file and link under the roots (or the files)."""
    state = {}
    for root in roots:
        root = str(root)
        paths = [root] if not os.path.isdir(root) or os.path.islink(root) else []
        if not paths:
            for directory, dirs, files in os.walk(root):
                paths.extend(os.path.join(directory, n) for n in dirs + files)
        for path in paths:
            if os.path.islink(path):
                state[path] = ("link", os.readlink(path), None)
            elif os.path.isdir(path):
                state[path] = ("dir", None, os.stat(path).st_mode)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    state[path] = ("file", hashlib.sha256(handle.read()).hexdigest(), os.stat(path).st_mode)
    return state


# ----------------------------------------------------------------------------------------------- building dumps
def write_json(path, content) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=1), encoding="utf-8")
    return path


def copy_fixture_dump(fixture: Path, side: str, dest: Path) -> Path:
    """Copy <fixture>/<side>/dump.json alone into dest/<side>/dump.json (writable)."""
    target = dest / side / "dump.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes((fixture / side / "dump.json").read_bytes())
    return target


def extract_tensor_fixture(side: str, dest: Path) -> Path:
    """Extract tensor_mix_step0/<side>.tar.gz into dest; return the path of its dump.json."""
    with tarfile.open(TENSOR_MIX / f"{side}.tar.gz") as tar:
        tar.extractall(dest, filter="data")
    found = glob.glob(str(dest / side / "step0" / "proc*" / "dump.json"))
    assert len(found) == 1, found
    return Path(found[0])


def stat_record(shape=(4,), dtype="Float32", **extra) -> dict:
    record = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape),
              "Max": 4.0, "Min": 1.0, "Mean": 2.5, "Norm": 5.477225575051661}
    record.update(extra)
    return record


def stats_dump(data: dict | None = None, task: str = "statistics", framework: str = "mindspore") -> dict:
    if data is None:
        data = {ENTRY: {"input_args": [stat_record(), stat_record()], "input_kwargs": {},
                        "output": [stat_record()]}}
    return {"task": task, "level": "L1", "framework": framework, "dump_data_dir": None, "data": data}


def npy_name(section: str, index: int) -> str:
    return f"{ENTRY}.{section}.{index}.npy"


def tensor_record(data_name: str, array: np.ndarray | None = None, shape=None, dtype="Float32", **extra) -> dict:
    """A real-data record; statistics come from `array` when given."""
    if array is not None and array.size and np.issubdtype(array.dtype, np.number):
        with np.errstate(all="ignore"):
            a = array.astype(np.float64)
            stats = {"Max": float(np.nanmax(a)), "Min": float(np.nanmin(a)), "Mean": float(np.nanmean(a)),
                     "Norm": float(np.sqrt(np.nansum(a * a)))}
        stats = {k: (v if np.isfinite(v) else None) for k, v in stats.items()}
        shape = list(array.shape) if shape is None else shape
    else:
        stats = {"Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0}
    record = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(shape if shape is not None else [4]),
              **stats, "data_name": data_name}
    record.update(extra)
    return record


def default_arrays() -> dict:
    """data_name -> array for the three tensors of the default tensor entry (two inputs, one output)."""
    return {npy_name("input", 0): np.arange(1, 5, dtype=np.float32),
            npy_name("input", 1): np.linspace(0.5, 2.0, 4, dtype=np.float32),
            npy_name("output", 0): np.arange(1, 5, dtype=np.float32) * 2}


def write_tensor_side(side_dir: Path, arrays: dict | None = None, records: dict | None = None,
                      write_files: bool = True) -> Path:
    """A tensor-mode dump: side_dir/dump.json + side_dir/dump_tensor_data/<data_name>.npy.

    arrays: data_name -> array (written with np.save unless write_files is False);
    records: slot ("input.0", "input.1", "output.0") -> record replacing the default one."""
    arrays = default_arrays() if arrays is None else arrays
    records = records or {}
    tensor_dir = side_dir / "dump_tensor_data"
    tensor_dir.mkdir(parents=True, exist_ok=True)
    if write_files:
        for name, array in arrays.items():
            np.save(tensor_dir / name, array, allow_pickle=False)
    sections = {"input": [], "output": []}
    for slot in ("input.0", "input.1", "output.0"):
        section, index = slot.split(".")
        name = npy_name(section, int(index))
        record = records.get(slot) or tensor_record(name, arrays.get(name))
        sections[section].append(record)
    content = {"task": "tensor", "level": "L1", "framework": "mindspore", "dump_data_dir": None,
               "data": {ENTRY: {"input_args": sections["input"], "input_kwargs": {},
                                "output": sections["output"]}}}
    return write_json(side_dir / "dump.json", content)


def rows_with_data_name(rows: list, text: str) -> list:
    return [row for row in rows if text in row.get("Data_name", "")]


METRIC_COLUMNS = ("Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio")


# ----------------------------------------------------------------------------------------------- runs and files
def two_step_dumps(root: Path, ranks: int = 2) -> Path:
    """root/{target,golden}/step{0,1}/rank<N>/{dump,stack,construct}.json from stats_mix; step1's golden
    differs from step0's (one output's Max scaled), so that the two steps' tables differ."""
    import shutil

    for step in (0, 1):
        for rank in range(ranks):
            for side in ("target", "golden"):
                folder = root / side / f"step{step}" / f"rank{rank}"
                folder.mkdir(parents=True)
                for name in ("dump.json", "stack.json", "construct.json"):
                    shutil.copy(STATS_MIX / side / name, folder / name)
    changed = root / "golden" / "step1" / "rank0" / "dump.json"
    content = json.loads(changed.read_text())
    output = content["data"]["Functional.linear.0.forward"]["output"][0]
    output["Max"] = output["Max"] * 3 + 1
    changed.write_text(json.dumps(content))
    return root


def file_hashes(directory) -> dict:
    """Name -> sha256 of every visible file directly in `directory`."""
    return {n: hashlib.sha256((Path(directory) / n).read_bytes()).hexdigest() for n in listing(directory)
            if not n.startswith(".") and (Path(directory) / n).is_file()}


def dead_pid() -> int:
    """The pid of a process of this machine that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
