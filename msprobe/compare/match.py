"""Pair target items with golden items: exact keys with backward renumbering (spec §3.4-3.5, §3.7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from msprobe.dump.flatten import Items
from msprobe.dump.naming import BACKWARD
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
    backward_with_forward(pairs, target, golden, pair_unmatched=not cross_framework)
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
    backward_with_forward(pairs, target, golden, pair_unmatched=not cross_framework)
    return pairs


def _forward_twin(entry_name: str) -> str:
    """The forward entry of a backward entry's name (API `x.3.backward`, module `Module.a.B.backward.0`)."""
    if entry_name.endswith(".backward"):
        return entry_name[:-len(".backward")] + ".forward"
    return entry_name.replace(".backward.", ".forward.")


def _backward_twin(entry_name: str) -> str:
    if entry_name.endswith(".forward"):
        return entry_name[:-len(".forward")] + ".backward"
    return entry_name.replace(".forward.", ".backward.")


def backward_with_forward(pairs: Pairs, target: Items, golden: Items, pair_unmatched: bool = True) -> None:
    """Pair, in place, every backward row with the backward of its forward's partner: the backward calls of an op
    are paired by their order (renumbered), so where one run has a call the other has not (a hand-written matmul
    in place of a Dense) the n-th backward of one run would meet another call's. A backward row is re-paired with
    the same item of the backward of the golden entry its forward is paired with (when that forward has one
    partner), and left without a partner when its forward has none. A backward whose forward either dump does not
    record keeps the partner of its order. pair_unmatched: a backward row without a partner gets the same item of
    that backward too (one framework: their items are named alike; across frameworks the mappings name them)."""
    if not len(pairs):
        return
    backward = np.fromiter((parts is not None and parts.direction == BACKWARD for parts in target.entry_parts),
                           dtype=bool, count=len(target.entry_parts))
    t_entry, g_entry = np.asarray(target.entry), np.asarray(golden.entry)
    rows_entry = t_entry[pairs.target]
    candidates = np.flatnonzero(backward[rows_entry] & (True if pair_unmatched else pairs.golden >= 0)) \
        if backward.any() else ()
    if not len(candidates):
        return
    t_index = {name: k for k, name in enumerate(target.entry_names)}
    g_index = {name: k for k, name in enumerate(golden.entry_names)}
    partners: dict = {}          # target forward entry -> the golden entries its rows are paired with
    matched = pairs.golden >= 0
    for entry, partner in zip(rows_entry[matched].tolist(), g_entry[pairs.golden[matched]].tolist()):
        partners.setdefault(entry, set()).add(partner)
    g_items: dict | None = None
    settled: dict = {}           # (target entry, golden entry) -> the pair agrees with the forwards' (or cannot)
    for row, entry, partner in zip(candidates.tolist(), rows_entry[candidates].tolist(),
                                   pairs.golden[candidates].tolist()):
        key = (entry, g_entry[partner] if partner >= 0 else -1)
        if settled.get(key):
            continue
        name = target.entry_names[entry]
        forward = t_index.get(_forward_twin(name))
        if forward is None:
            settled[key] = True
            continue
        if partner >= 0:
            golden_name = golden.entry_names[key[1]]
            current = g_index.get(_forward_twin(golden_name))
            if current is None or current in partners.get(forward, ()):
                settled[key] = True
                continue
            suffix = golden.name[partner][len(golden_name):]
        else:
            suffix = target.name[pairs.target[row]][len(name):]
        right = partners.get(forward, ())
        found = -1
        if len(right) == 1:
            if g_items is None:
                g_items = {item: k for k, item in enumerate(golden.name)}
            found = g_items.get(_backward_twin(golden.entry_names[next(iter(right))]) + suffix, -1)
        pairs.golden[row] = found


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
