"""Optional conformance over the whole reference data set (../shared/refdata), enabled by MSPROBE_REFDATA.

Every file-mode compare the reference msprobe ran (label cmp_step*_default / *_file in commands.jsonl)
is re-run with our compare, and every cell is checked as in test_conformance.py. CI enables it when the
reference data lies beside the repository; the project never needs it otherwise.
"""

from __future__ import annotations

import json
import os
import shlex
import tarfile
from pathlib import Path

import pytest

from conftest import only_file, read_csv, run_cli
from test_conformance import differences, reference_header, split_documented

REFDATA = os.environ.get("MSPROBE_REFDATA")
pytestmark = pytest.mark.skipif(not REFDATA, reason="set MSPROBE_REFDATA=<path to shared/refdata> to run")


def _cases():
    if not REFDATA:
        return []
    cases = []
    for commands in sorted(Path(REFDATA, "pytorch").glob("*/commands.jsonl")):
        for line in commands.read_text().splitlines():
            record = json.loads(line)
            if not record["cmd"].startswith("msprobe compare") or record["rc"] != 0:
                continue
            args = shlex.split(record["cmd"])
            target, golden = args[args.index("-tp") + 1], args[args.index("-gp") + 1]
            if not target.endswith(".json") or "-fm" in args or "-da" in args or "--xlsx" in args:
                continue
            outputs = [o for o in record["outputs"] if ".csv" in o]
            if len(outputs) == 1:
                cases.append(pytest.param(commands.parent, target, golden, outputs[0],
                                          id=f"{commands.parent.name}-{record['label']}"))
    return cases


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """Case folders whose dumps are stored as tar.gz, unpacked once."""
    cache = {}

    def get(case: Path) -> Path:
        if not (case / "target.tar.gz").exists():
            return case
        if case not in cache:
            base = tmp_path_factory.mktemp(case.name)
            for side in ("target", "golden"):
                with tarfile.open(case / f"{side}.tar.gz") as archive:
                    archive.extractall(base, filter="data")
            cache[case] = base
        return cache[case]
    return get


@pytest.mark.parametrize("case, target, golden, reference", _cases())
def test_reference_compare(case, target, golden, reference, unpacked, tmp_path):
    root = unpacked(case)
    stored = case / reference
    if not stored.exists():
        stored = case / (reference + ".gz")
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", root / target, "-gp", root / golden, "-o", out, "--csv", "-c"]) == 0
    ours = read_csv(only_file(out, "compare_result_*.csv"))
    expected = read_csv(stored)
    assert reference_header(ours[0]) == expected[0]
    _, found = split_documented(differences(expected, ours), expected, ours)
    # Besides the verdict's documented additions (issue 27, docs/compare.md §6.2), DECISIONS 13 (One-Thousandth
    # threshold 0.6) is the only allowed difference.
    message = ours[0].index("Err_message")
    unexpected = [(row, name, column) for row, name, column, _, _ in found
                  if column not in ("Result", "Err_message") or "One Thousandth" not in ours[row][message]]
    assert unexpected == []
