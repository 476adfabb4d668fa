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


def test_one_way_to_install_the_mindspore_side_everywhere():
    """README, every doc, the import hint and the package docstring say the same: msprobe's mindspore extra in an
    environment of its own (docs/acc_check.md said `pip install mindspore==2.10.0 "numpy<2" ... && pip install
    msprobe-toolkit`)."""
    from msprobe.optional import INSTALL

    one = 'pip install "msprobe-toolkit[mindspore]"'
    texts = {path.name: path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    texts["msprobe/mindspore/__init__.py"] = (ROOT / "msprobe" / "mindspore" / "__init__.py").read_text(encoding="utf-8")
    texts["INSTALL hint"] = INSTALL["mindspore"]
    saying = {name: text for name, text in texts.items() if re.search(r"pip install[^\n]*mindspore", text)}
    assert {"README.md", "dump.md", "acc_check.md", "INSTALL hint"} <= set(saying)
    for name, text in saying.items():
        for line in re.findall(r"[^\n]*pip install[^\n]*mindspore[^\n]*", text):
            assert one in line and not re.search(r"pip install[^\n]*\bmindspore==", line), (name, line)


def test_the_mint_ops_the_mindspore_docs_say_work_on_cpu_do():
    """docs/dump.md lists the mint ops with a CPU kernel in MindSpore 2.10 (a new user's model of mint.nn.LayerNorm,
    gelu and cross_entropy failed on CPU): each of them runs here on float32 tensors of the shapes it takes."""
    ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore tests "
                                                 "run in the separate environment of .ci/run)")
    import numpy as np
    from mindspore import Tensor, mint

    text = (ROOT / "docs" / "dump.md").read_text(encoding="utf-8")
    listed = re.search(r"\* work on CPU: (.*?);\n\* no CPU kernel", text, re.S).group(1)
    names = re.findall(r"`([\w.]+)`", listed)
    assert len(names) >= 30
    x = Tensor(np.random.default_rng(0).random((2, 4)).astype(np.float32))
    calls = {"matmul": lambda f: f(x, x.T), "bmm": lambda f: f(x[None], x.T[None]), "clamp": lambda f: f(x, 0.1, 0.5),
             "where": lambda f: f(x > 0.5, x, x), "cat": lambda f: f((x, x)), "reshape": lambda f: f(x, (4, 2)),
             "transpose": lambda f: f(x, 0, 1), "zeros": lambda f: f((2, 2)), "ones": lambda f: f((2, 2)),
             "pow": lambda f: f(x, 2), "softmax": lambda f: f(x, dim=-1), "linear": lambda f: f(x, x),
             "Linear": lambda f: f(4, 3)(x), "ReLU": lambda f: f()(x), "SiLU": lambda f: f()(x)}
    binary = {"add", "sub", "mul", "div"}
    for name in names:
        function = mint
        for part in name.split(".")[1:]:
            function = getattr(function, part)
        short = name.rsplit(".", 1)[1]
        call = calls.get(short) or ((lambda f: f(x, x)) if short in binary else (lambda f: f(x)))
        result = call(function)
        assert (result[0] if isinstance(result, tuple) else result).asnumpy().size > 0, name
    assert ms.__version__.startswith("2.10")
