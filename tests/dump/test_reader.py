"""dump.reader: NaN/Infinity/-Infinity tokens, which orjson refuses, are rewritten to sentinel strings in one copy
of the file; a token inside a JSON string falls back to the stdlib parser, so the rewrite never changes a value.
A file that cannot be JSON (NUL bytes, cut) is refused from its two ends, before it is read."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys

import pytest

from msprobe.dump import reader
from msprobe.dump.reader import SENTINELS, load_json
from msprobe.errors import DumpFormatError

from conftest import fixture_pair


def _one_after_another(raw: bytes) -> bytes | None:
    """The rewrite as three replacements, -Infinity first (the definition the one-copy rewrite must equal)."""
    if b"NaN" not in raw and b"Infinity" not in raw:
        return None
    for token, sentinel in ((b"-Infinity", b'"\\u0000msprobe:ninf"'), (b"Infinity", b'"\\u0000msprobe:inf"'),
                            (b"NaN", b'"\\u0000msprobe:nan"')):
        raw = raw.replace(token, sentinel)
    return raw


def test_rewrite_equals_the_replacements_one_after_another():
    rng = random.Random(11)
    pieces = [b"NaN", b"Infinity", b"-Infinity", b"-", b"--", b"N", b"a", b"Infinit", b"nfinity", b" ", b"1", b'"',
              b"NaNaN", b"-NaN", b"InfinityInfinity", b":", b","]
    for _ in range(20_000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert reader._without_non_finite_tokens(raw) == _one_after_another(raw), raw


def test_tokens_read_as_floats(tmp_path):
    path = tmp_path / "dump.json"
    path.write_bytes(b'{"a": [NaN, Infinity, -Infinity, 1.5], "b": {"Max": -Infinity, "Min":NaN}}')
    content = load_json(str(path))
    values = [SENTINELS.get(v, v) for v in content["a"]]
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf and values[3] == 1.5
    assert SENTINELS[content["b"]["Max"]] == -math.inf and math.isnan(SENTINELS[content["b"]["Min"]])


def test_token_inside_a_string_keeps_the_string(tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"name": "NaN-Infinity", "x": "a"}).replace('"a"', "Infinity"))
    content = load_json(str(path))
    assert content["name"] == "NaN-Infinity"
    assert content["x"] == math.inf          # the stdlib parser reads the bare token as a float itself


def _sparse(path, size: int, head: bytes = b"", tail: bytes = b"") -> None:
    """A file of `size` bytes, holes (NUL bytes) except head and tail, made as truncate makes it."""
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size - len(tail))
        handle.seek(0, os.SEEK_END)
        handle.write(tail)


@pytest.mark.parametrize("head, tail, words", [
    (b"", b"", "holds NUL bytes (a sparse or damaged file)"),
    (b'{"task": "statistics", "data": {', b"}}", "holds NUL bytes"),
], ids=["holes", "holes-between-valid-ends"])
def test_a_2_gb_sparse_dump_is_refused_without_reading_it(tmp_path, head, tail, words):
    """Issue 18: a 2 GB sparse dump.json was read whole (4.1 GB RSS) before it was refused; now a child process
    refuses it in one line without reading it (its peak RSS stays far below the file size). The peak is the child's
    own VmHWM: ru_maxrss would carry the forking pytest process's peak across exec."""
    target = tmp_path / "t" / "dump.json"
    target.parent.mkdir()
    _sparse(target, 2 * 1024 ** 3, head, tail)
    with pytest.raises(DumpFormatError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_json(str(target))
    _, golden = fixture_pair("stats_L1_step0")
    code = ("import sys\nfrom msprobe.cli.main import main\ncode = main(sys.argv[1:])\n"
            "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')))\n"
            "sys.exit(code)")
    run = subprocess.run([sys.executable, "-c", code, "compare", "-tp", str(target), "-gp", golden, "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and words in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert int(run.stdout.split()[-1]) < 400 * 1024            # KiB: 0.4 GB, for a 2 GB file


@pytest.mark.parametrize("text, words", [
    ('{"task": "statistics", "data": {"a": [' + "1, " * 5000 + "1", "it ends with b' 1, 1, 1"),
    ('"' + "x" * 10000 + '"', "is not a JSON object or array"),
    ("[" + "1, " * 5000 + "1]\n\n", None),
    ("\ufeff  {" + '"a": 1, ' * 2000 + '"b": 2}', None),
], ids=["cut", "string", "array", "bom"])
def test_large_files_are_checked_at_both_ends(tmp_path, text, words):
    path = tmp_path / "dump.json"
    path.write_text(text, encoding="utf-8")
    if words is None:
        assert load_json(str(path))
    else:
        with pytest.raises(DumpFormatError, match=words):
            load_json(str(path))
