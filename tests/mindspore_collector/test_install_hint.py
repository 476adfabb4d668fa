"""`import msprobe.mindspore` where mindspore is missing (the main test environment, numpy 2) or cannot be imported
is one ImportError naming the install command; nothing else of msprobe needs mindspore. Runs in every
environment."""

from __future__ import annotations

import subprocess
import sys

from msprobe.optional import INSTALL

IMPORT = """
import sys
{setup}
try:
    import msprobe.mindspore
except ImportError as exc:
    print(type(exc).__name__ + ": " + str(exc))
import msprobe.cli.main, msprobe.compare.pipeline, msprobe.collect     # the rest works without mindspore
"""


def _run(setup: str) -> str:
    proc = subprocess.run([sys.executable, "-c", IMPORT.format(setup=setup)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_without_mindspore_the_import_names_the_install_command():
    printed = _run('sys.modules["mindspore"] = None')
    assert printed == ("ImportError: msprobe.mindspore (the MindSpore collector) needs mindspore, which is not "
                       f"installed: {INSTALL['mindspore']}")


def test_a_broken_mindspore_is_reported_with_its_own_error(tmp_path):
    (tmp_path / "mindspore").mkdir()
    (tmp_path / "mindspore" / "__init__.py").write_text("raise ImportError('numpy.core.multiarray failed to import')\n")
    printed = _run(f"sys.path.insert(0, {str(tmp_path)!r})")
    assert printed.startswith("ImportError: msprobe.mindspore (the MindSpore collector) needs mindspore, which cannot "
                              "be imported here (ImportError: numpy.core.multiarray failed to import): pip install")


def test_importing_the_collector_prints_no_warning_of_mindspore():
    """`import msprobe.mindspore` printed MindSpore 2.9+'s "Module 'mindspore.common.api' is deprecated" warning (our
    import of it): what the user's own `import mindspore` prints is all that is printed."""
    import pytest

    pytest.importorskip("mindspore", reason="mindspore is not installed (the MindSpore collector tests run in the "
                                            "separate environment of .ci/run)")
    quiet = subprocess.run([sys.executable, "-c", "import mindspore"], capture_output=True, text=True)
    ours = subprocess.run([sys.executable, "-c", "import mindspore, msprobe.mindspore"], capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert "deprecated" not in ours.stderr and ours.stderr == quiet.stderr
