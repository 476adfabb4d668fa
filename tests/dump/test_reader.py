"""dump.reader: NaN/Infinity/-Infinity tokens, which orjson refuses, are rewritten to sentinel strings in one copy
of the file; a token inside a JSON string falls back to the stdlib parser, so the rewrite never changes a value."""

from __future__ import annotations

import json
import math
import random

from msprobe.dump import reader
from msprobe.dump.reader import SENTINELS, load_json


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
