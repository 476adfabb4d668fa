"""The reference's own compare (PyPI ``mindstudio-probe``) accepts dumps written by our PrecisionDebugger.

Optional: runs only when MSPROBE_REFERENCE_PYTHON names an interpreter that has mindstudio-probe installed
(it installs a package also called ``msprobe``, so it must live in its own venv), e.g.

    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch==2.13.0 \
        && /tmp/refvenv/bin/pip install mindstudio-probe==26.2.0
    MSPROBE_REFERENCE_PYTHON=/tmp/refvenv/bin/python pytest tests/pytorch/test_reference_accepts.py
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import only_file, read_csv, run_cli

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from tests.pytorch.test_dump import train  # noqa: E402

ENV = "MSPROBE_REFERENCE_PYTHON"


def reference_python() -> str:
    python = os.environ.get(ENV)
    if not python:
        pytest.skip(f"{ENV} is not set (point it to a python with mindstudio-probe installed)")
    if not os.path.exists(python):
        pytest.skip(f"{ENV}={python} does not exist")
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('mindstudio-probe'))"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"mindstudio-probe is not installed in {python}")
    return python


def reference_compare_command(python: str) -> list:
    """The ``msprobe`` console script installed beside the interpreter, else its module entry point."""
    script = Path(python).parent / "msprobe"
    if script.exists():
        return [str(script)]
    return [python, "-m", "msprobe.msprobe"]


def dump_tiny_gpt(dump_path: Path, level: str, variant: str) -> Path:
    """One step of the refdata dump_single.py loop (default size) with our collector; returns the proc dir."""
    train(dump_path=str(dump_path), debugger_kwargs={"task": "statistics", "level": level},
          target=variant == "target")
    (proc,) = [p for p in (dump_path / "step0").iterdir() if p.is_dir()]
    return proc


@pytest.mark.parametrize("level", ["L1", "mix"])
def test_reference_compare_accepts_our_dumps(tmp_path, level):
    python = reference_python()
    target = dump_tiny_gpt(tmp_path / "target", level, "target")
    golden = dump_tiny_gpt(tmp_path / "golden", level, "golden")

    out = tmp_path / "reference_out"
    proc = subprocess.run(reference_compare_command(python)
                          + ["compare", "-tp", str(target / "dump.json"), "-gp", str(golden / "dump.json"),
                             "-o", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, f"reference compare failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    reference_rows = read_csv(only_file(out, "compare_result_*.csv"))

    ours_out = tmp_path / "ours_out"
    assert run_cli(["compare", "-tp", target / "dump.json", "-gp", golden / "dump.json", "-o", ours_out,
                    "--csv"]) == 0
    our_rows = read_csv(only_file(ours_out, "compare_result_*.csv"))

    assert len(reference_rows) > 100
    assert len(reference_rows) == len(our_rows)
    assert reference_rows[0] == our_rows[0]
    assert [row[0] for row in reference_rows] == [row[0] for row in our_rows]
