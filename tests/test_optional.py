"""msprobe/optional.py: a missing optional dependency is one line naming what needs it and how to install it, and
`msprobe -h` / `<command> -h` work and stay light whichever optional dependency is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from msprobe.errors import MsprobeError
from msprobe.optional import INSTALL, require


def test_require_returns_the_module():
    import json

    assert require("json", "a test") is json


def test_a_missing_module_is_named_with_its_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)       # import ray fails as when it is not installed
    with pytest.raises(MsprobeError) as caught:
        require("ray", "--backend ray")
    assert str(caught.value) == f"--backend ray needs ray, which is not installed: {INSTALL['ray']}"
    assert "\n" not in str(caught.value)


def test_the_error_class_is_the_callers(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r'to_pandas\(\) needs pandas.*pip install "msprobe-toolkit\[pandas\]"'):
        require("pandas", "to_pandas()", ImportError)


def test_an_installed_module_failing_on_import_is_reported_with_its_error(tmp_path, monkeypatch):
    (tmp_path / "mindspore").mkdir()
    (tmp_path / "mindspore" / "__init__.py").write_text("raise RuntimeError('built against numpy 1.x\\nmore')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mindspore", raising=False)
    with pytest.raises(MsprobeError) as caught:
        require("mindspore", "acc_check of a MindSpore dump")
    assert str(caught.value).startswith("acc_check of a MindSpore dump needs mindspore, which cannot be imported "
                                        "here (RuntimeError: built against numpy 1.x): pip install \"msprobe-toolkit[mindspore]\"")


HELP_WITHOUT = """
import sys
for name in ("torch", "mindspore", "ray", "pandas"):
    sys.modules[name] = None                  # as if none of them were installed
from msprobe.cli.main import COMMANDS, main
for argv in [["-h"]] + [[command, "-h"] for command in COMMANDS]:
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code == 0, (argv, exc.code)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "orjson", "yaml") and sys.modules[m])
assert not heavy, heavy
"""


def test_help_of_every_command_without_the_optional_dependencies():
    proc = subprocess.run([sys.executable, "-c", HELP_WITHOUT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: msprobe" in proc.stdout and "usage: msprobe graph" in proc.stdout


ONE_COMMAND = """
import sys
from msprobe.cli.main import COMMANDS, main
try:
    main(["graph_visualize", "-h"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
others = sorted(m for name, (m, _) in COMMANDS.items() if name != "graph" and m in sys.modules)
assert not others, others
"""


def test_a_command_sets_up_only_its_own_options():
    """A run of one command imports no other command's module, and its parser reads argv as the full parser does
    (the others are listed, with their help, in `msprobe -h` and in the error of an unknown command)."""
    proc = subprocess.run([sys.executable, "-c", ONE_COMMAND], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: msprobe graph" in proc.stdout
    from msprobe.cli.main import build_parser, command_named

    assert command_named(["graph_visualize", "-tp", "x"]) == "graph_visualize"
    assert command_named(["-h"]) is None and command_named(["comapre"]) is None and command_named([]) is None
    argv = ["compare", "-tp", "t/dump.json", "-gp", "g/dump.json", "-o", "out", "--csv"]
    full, one = build_parser(), build_parser("compare")
    assert vars(one.parse_args(argv)) == vars(full.parse_args(argv))
    assert one.format_help() == full.format_help()
    assert one.subcommands["compare"].format_help() == full.subcommands["compare"].format_help()
