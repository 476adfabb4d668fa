"""The layers of msprobe/ (pyproject.toml [tool.importlinter], docs/architecture.md): no package imports a package
above it, and no modules of a package import each other in a cycle. .ci/run runs `lint-imports` too; this test
makes the README's test command check the same contracts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    pytest.importorskip("importlinter", reason='import-linter is not installed (pip install -e ".[test]")')
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") == 2, proc.stdout
