"""What a newcomer meets first: the distribution's name and extras, the install hints that name them, and docs that
stand alone (they cite nothing a user does not have)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

from msprobe.optional import INSTALL
from msprobe.version import DISTRIBUTION, __version__

ROOT = Path(__file__).resolve().parent.parent
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Every text that tells a user what to install: the docs, the package's messages, the tests' skip reasons.
HINT_FILES = USER_DOCS + sorted((ROOT / "msprobe").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py")) \
    + sorted((ROOT / "benchmarks").glob("*.py")) + [ROOT / "benchmarks" / "README.md"]
HINT_FILES.remove(Path(__file__).resolve())
# `pip install [-e] <spec>`, the spec quoted or not (and escaped inside a string or a regular expression)
PIP_INSTALL = re.compile(r"pip install (?:-e )?\\?[\"']?([\w.{}\[\],\\-]+)")


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_distribution_is_not_the_unrelated_msprobe_of_pypi():
    """`msprobe` on PyPI is another project (0.1.2-0.1.4): `pip install msprobe` would install it. The command and
    the package keep the name msprobe."""
    project = _pyproject()["project"]
    assert project["name"] == DISTRIBUTION == "msprobe-toolkit"
    assert project["version"] == __version__
    assert project["scripts"] == {"msprobe": "msprobe.cli.main:console_main"}
    installed = metadata.distribution(DISTRIBUTION)     # the editable install of this tree
    assert installed.version == __version__
    assert [(e.name, e.value) for e in installed.entry_points if e.group == "console_scripts"] == \
        [("msprobe", "msprobe.cli.main:console_main")]


def _our_install_specs() -> list:
    """(file, line number, spec) of every `pip install` of this project in docs, messages and tests."""
    found = []
    for path in HINT_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for spec in PIP_INSTALL.findall(line):
                spec = spec.replace("\\", "").replace("{DISTRIBUTION}", DISTRIBUTION)
                if re.match(r"(msprobe|\.)", spec):
                    found.append((path.relative_to(ROOT).as_posix(), number, spec))
    return found


def test_every_install_hint_names_our_distribution_and_an_extra_it_has():
    extras = set(_pyproject()["project"]["optional-dependencies"])
    specs = _our_install_specs()
    assert len(specs) >= 10       # README, python_api.md, scaling.md, graph.md, the hints and skip reasons
    wrong = [(path, number, spec) for path, number, spec in specs
             if not re.fullmatch(rf"({re.escape(DISTRIBUTION)}|\.)(\[[\w,-]+\])?", spec)]
    assert wrong == [], "pip install of a name that is not ours"
    named = {extra for _, _, spec in specs for extra in re.findall(r"\[([\w,-]+)\]", spec)}
    assert {e for group in named for e in group.split(",")} <= extras
    assert INSTALL["ray"] == f'pip install "{DISTRIBUTION}[ray]"'
    assert INSTALL["pandas"] == f'pip install "{DISTRIBUTION}[pandas]"'


def test_the_readme_keeps_its_two_commands_and_installs_from_the_tree():
    """The set-up is two commands: install and compare the bundled example; install the test extras and test."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert [len(b.strip().splitlines()) for b in blocks] == [1, 1]
    assert blocks[0].startswith("pip install -e . && msprobe compare ")
    assert blocks[1].startswith('pip install torch==2.13.0 && pip install -e ".[test]" && python -m pytest')


def test_the_tensorboard_extra_installs_the_viewer_and_graph_md_names_it():
    extras = _pyproject()["project"]["optional-dependencies"]
    names = {re.match(r"[\w.-]+", requirement).group(0) for requirement in extras["tensorboard"]}
    # google-crc32c: the record checksums of the training monitor's event files (docs/monitor.md), in C
    assert names == {"tb-graph-ascend", "tensorboard", "google-crc32c"}
    assert f'pip install "{DISTRIBUTION}[tensorboard]"' in (ROOT / "docs" / "monitor.md").read_text(encoding="utf-8")
    graph = (ROOT / "docs" / "graph.md").read_text(encoding="utf-8")
    assert f'pip install "{DISTRIBUTION}[tensorboard]"' in graph
    viewing = graph.split("## Viewing in TensorBoard", 1)[1].split("\n## ", 1)[0]
    assert "`中|en`" in viewing and "CJK font" in viewing and "fonts-noto-cjk" in viewing


# Documents a user of the docs does not have: the project's design records and specs, the reference data set and
# its READMEs, the project's issues, and paths of the machine the docs were written on. A name from a dump (a
# stack path such as /data/refdata/...) may appear inside an example output.
FORBIDDEN = [
    (re.compile(r"DECISIONS"), "the project's decision record"),
    (re.compile(r"shared/"), "the project's shared folder"),
    (re.compile(r"\bspec(s|ification)?\b", re.I), "the project's specification"),
    (re.compile(r"(?<![\w/.-])refdata\b", re.I), "the reference data set or its README"),
    (re.compile(r"\bissue \d+", re.I), "the project's issues"),
    (re.compile(r"/work/"), "a path of the developers' machine"),
]


@pytest.mark.parametrize("path", USER_DOCS, ids=[p.name for p in USER_DOCS])
def test_users_docs_stand_alone(path):
    hits = [f"{path.name}:{number}: {why}: {line.strip()[:100]}"
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for pattern, why in FORBIDDEN if pattern.search(line)]
    assert hits == []


def test_the_default_test_run_leaves_out_the_slow_tests_and_names_its_skips():
    """The README's test command: fast (the end-to-end tests marked slow are left out, and CI runs them) and every
    skip with its reason (-rs)."""
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"]
    assert "-rs" in addopts and addopts[addopts.index("-m") + 1] == "not slow"
    assert any(marker.startswith("slow:") for marker in options["markers"])
    marked = [path for path in (ROOT / "tests").rglob("test_*.py")
              if re.search(r"^(@pytest\.mark\.slow|pytestmark = .*pytest\.mark\.slow)", path.read_text(encoding="utf-8"),
                           re.M)]
    assert len(marked) >= 5
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # CI runs the slow part too: on every core but the wide matrices' `extended` cases, the `serial` ones alone
    assert "\npython -m pytest -q\n" in ci and '\npython -m pytest -q -m "slow and not extended and not serial"\n' in ci
    assert '\npython -m pytest -q -n 0 -m "slow and serial"\n' in ci
    assert {marker.split(":")[0] for marker in options["markers"]} >= {"slow", "extended", "serial"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`python -m pytest -m slow`" in readme and '`python -m pytest -m ""`' in readme
