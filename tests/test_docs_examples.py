"""The examples in the README and docs run as written, so the docs cannot rot."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import only_file, run_cli

ROOT = Path(__file__).parent.parent


def code_blocks(path: Path, language: str) -> list:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def test_readme_first_command_compares_the_bundled_example(tmp_path):
    (setup,) = [b for b in code_blocks(ROOT / "README.md", "bash") if "examples/target/dump.json" in b]
    command = setup.strip().split("&&", 1)[1]
    args = shlex.split(command)
    assert args[:2] == ["msprobe", "compare"]
    args = [str(ROOT / a) if a.startswith("examples/") else a for a in args[1:]]
    args[args.index("-o") + 1] = str(tmp_path / "output")
    assert run_cli(args) == 0
    only_file(tmp_path / "output", "compare_result_*.xlsx")


def test_dump_quick_start_runs_and_its_dump_compares(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    (quick_start,) = [b for b in code_blocks(ROOT / "docs" / "dump.md", "python") if "msprobe.pytorch" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(quick_start, "docs/dump.md", "exec"), {})
    steps = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert steps == ["step0", "step1"]
    assert run_cli(["compare", "-tp", tmp_path / "dump" / "step0", "-gp", tmp_path / "dump" / "step1", "-o",
                    tmp_path / "out", "--csv", "-c"]) == 0


def test_mindspore_dump_quick_start_runs_and_its_dump_compares_and_graphs(tmp_path, monkeypatch):
    pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore tests run in "
                                            "the separate environment of .ci/run)")
    (quick_start,) = [b for b in code_blocks(ROOT / "docs" / "dump.md", "python") if "msprobe.mindspore" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(quick_start, "docs/dump.md", "exec"), {"__name__": "__main__"})   # as a script (MindSpore
    dump = tmp_path / "ms_dump"                                                     # needs a module name)
    assert sorted(p.name for p in dump.iterdir()) == ["step0", "step1"]
    assert run_cli(["compare", "-tp", dump / "step0", "-gp", dump / "step1", "-o", tmp_path / "out", "--csv",
                    "-c"]) == 0
    assert run_cli(["graph", "-tp", dump / "step0", "-o", tmp_path / "graph"]) == 0
    assert list((tmp_path / "graph").glob("*.vis*"))
