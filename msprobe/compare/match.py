"""Pair target items with golden items: exact keys with backward renumbering (spec §3.4-3.5, §3.7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msprobe.dump.flatten import Items
from msprobe.frameworks.dtypes import dtype_rule_ok


@dataclass(frozen=True)
class Pairs:
    """Rows of a result table: target item index and golden item index (-1 = no golden partner)."""

    target: np.ndarray
    golden: np.ndarray

    def __len__(self) -> int:
        return len(self.target)

    @property
    def matched(self) -> np.ndarray:
        return self.golden >= 0


def match_exact(target: Items, golden: Items, renumber_backward: bool = True,
                cross_framework: bool = False, dtype_rule: bool = True) -> Pairs:
    """Left join of target items on golden items by item name (backward calls renumbered)."""
    return match_keys(target, golden, target.keys(renumber_backward), golden.keys(renumber_backward),
                      cross_framework, dtype_rule)


def match_fuzzy(target: Items, golden: Items, target_construct: dict | None, golden_construct: dict | None,
                cross_framework: bool = False) -> Pairs:
    """Pair API calls by name and order under the same parent module, ignoring call counts (-fm)."""
    return match_keys(target, golden, target.fuzzy_keys(target_construct), golden.fuzzy_keys(golden_construct),
                      cross_framework, True)


def match_mapped(target: Items, golden: Items, mappings, cross_framework: bool = True) -> Pairs:
    """Keys from the active mappings (see MappingSet.key). Backward calls are renumbered on both sides before
    mapping, so the n-th backward call of an API pairs with the n-th on the other side."""
    t_keys = target.keys(renumber_backward=True)
    g_keys = golden.keys(renumber_backward=True)
    golden_index: dict[str, list[int]] = {}
    for position, (key, name) in enumerate(zip(g_keys, golden.name)):
        golden_index.setdefault("K" + key, []).append(position)
        golden_index.setdefault("N" + name, []).append(position)
    lookups = []
    data_mapped = []
    for name, renumbered, state in zip(target.name, t_keys, target.state):
        key, from_data = mappings.key(name, renumbered, state)
        lookups.append(("N" if from_data else "K") + key)
        data_mapped.append(from_data)
    pairs = _join(lookups, golden_index)
    exempt = np.asarray(data_mapped, dtype=bool)[pairs.target] if len(pairs) else np.zeros(0, dtype=bool)
    apply_dtype_rule(pairs, target, golden, cross_framework, exempt)
    return pairs


def match_keys(target: Items, golden: Items, target_keys: list, golden_keys: list, cross_framework: bool = False,
               dtype_rule: bool = True) -> Pairs:
    """Left join of target items on golden items by compare key; every duplicate combination is a row."""
    golden_index: dict[str, list[int]] = {}
    for position, key in enumerate(golden_keys):
        golden_index.setdefault(key, []).append(position)
    pairs = _join(target_keys, golden_index)
    if dtype_rule:
        apply_dtype_rule(pairs, target, golden, cross_framework)
    return pairs


def _join(target_keys: list, golden_index: dict) -> Pairs:
    rows_t: list[int] = []
    rows_g: list[int] = []
    for position, key in enumerate(target_keys):
        partners = golden_index.get(key)
        if partners is None:
            rows_t.append(position)
            rows_g.append(-1)
        elif len(partners) == 1:
            rows_t.append(position)
            rows_g.append(partners[0])
        else:
            rows_t.extend([position] * len(partners))
            rows_g.extend(partners)
    return Pairs(np.asarray(rows_t, dtype=np.int64), np.asarray(rows_g, dtype=np.int64))


def apply_dtype_rule(pairs: Pairs, target: Items, golden: Items, cross_framework: bool,
                     exempt: np.ndarray | None = None) -> None:
    """Turn pairs whose dtypes are incompatible into unmatched rows, in place (exempt rows are kept)."""
    t_dtype, g_dtype = target.dtype, golden.dtype
    candidates = pairs.golden >= 0
    if exempt is not None:
        candidates &= ~exempt
    for row in np.flatnonzero(candidates):
        a = t_dtype[pairs.target[row]]
        b = g_dtype[pairs.golden[row]]
        if a != b and not dtype_rule_ok(a, b, cross_framework):
            pairs.golden[row] = -1
