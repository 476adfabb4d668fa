"""dtype spellings of PyTorch, MindSpore and numpy, normalised so that the compare can treat them alike."""

from __future__ import annotations

import re
from functools import lru_cache

_PREFIXES = ("torch.", "mindspore.", "ms.", "numpy.", "np.")
_MINDSPORE_NAME = re.compile(r"^(U?Int\d+|Float\d+|BFloat16|Bool|Complex\d+|Float8\w*)$")

FLOAT_GROUP = frozenset({"float16", "float32", "float64", "bfloat16"})
_FAMILIES = (("int", re.compile(r"^u?int\d+$")), ("float", re.compile(r"^(b?float\d+)$")),
             ("bool", re.compile(r"^bool$")), ("complex", re.compile(r"^complex\d+$")))


@lru_cache(maxsize=1024)
def canonical(dtype: str | None) -> str | None:
    """`Float32`, `torch.float32`, `float32` and `mindspore.float32` all become `float32`."""
    if dtype is None:
        return None
    for prefix in _PREFIXES:
        if dtype.startswith(prefix):
            rest = dtype[len(prefix):]
            return rest.lower() if rest[:1].isalpha() and rest != "Size" else dtype
    if _MINDSPORE_NAME.match(dtype):
        return dtype.lower()
    return dtype


@lru_cache(maxsize=1024)
def family(dtype: str | None) -> str | None:
    """int / float / bool / complex for tensor dtypes (cross-framework rule); the canonical name otherwise."""
    name = canonical(dtype)
    if name is None:
        return None
    for label, pattern in _FAMILIES:
        if pattern.match(name):
            return label
    return name


def same_dtype(a: str | None, b: str | None) -> bool:
    return canonical(a) == canonical(b)


def dtype_rule_ok(a: str | None, b: str | None, cross_framework: bool) -> bool:
    """Keep a matched pair when dtypes agree, or are both floats (spec §3.7)."""
    ca, cb = canonical(a), canonical(b)
    if ca == cb:
        return True
    if ca in FLOAT_GROUP and cb in FLOAT_GROUP:
        return True
    return cross_framework and family(a) == family(b)
