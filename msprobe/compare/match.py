"""Pair target items with golden items: exact keys with backward renumbering (spec §3.4-3.5, §3.7)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from operator import ne

import numpy as np

from msprobe.compare.error_origin import forward_twin
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
    unique = dict(zip(golden_keys, range(len(golden_keys))))
    if len(unique) == len(golden_keys):     # the usual dump: every key once, joined in C
        pairs = Pairs(np.arange(len(target_keys), dtype=np.int64),
                      np.fromiter(map(unique.get, target_keys, repeat(-1)), dtype=np.int64, count=len(target_keys)))
    else:
        golden_index: dict[str, list[int]] = {}
        for position, key in enumerate(golden_keys):
            golden_index.setdefault(key, []).append(position)
        pairs = _join(target_keys, golden_index)
    if dtype_rule:
        apply_dtype_rule(pairs, target, golden, cross_framework)
    backward_with_forward(pairs, target, golden, pair_unmatched=not cross_framework)
    return pairs


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
    t_forward = _forward_entries(target)
    if not (t_forward >= 0).any():
        return
    g_forward = _forward_entries(golden)
    t_entry, g_entry = np.asarray(target.entry), np.asarray(golden.entry)
    rows_entry = t_entry[pairs.target]
    matched = pairs.golden >= 0
    width = max(len(golden.entry_names), 1)
    partner_keys = np.unique(rows_entry[matched] * width + g_entry[pairs.golden[matched]])
    row_forward = t_forward[rows_entry]
    partner_entry = np.where(matched, g_entry[np.where(matched, pairs.golden, 0)], -1)
    partner_forward = np.where(matched, g_forward[np.maximum(partner_entry, 0)], -1)
    agrees = (partner_forward < 0) | np.isin(row_forward * width + partner_forward, partner_keys)
    wrong = (row_forward >= 0) & matched & ~agrees
    if pair_unmatched:
        wrong |= (row_forward >= 0) & ~matched
    rows = np.flatnonzero(wrong)
    if not len(rows):
        return
    partners: dict = {}          # target forward entry -> the golden entries its rows are paired with
    for entry, partner in zip(rows_entry[matched].tolist(), partner_entry[matched].tolist()):
        partners.setdefault(entry, set()).add(partner)
    g_items = {item: k for k, item in enumerate(golden.name)}
    claimed = None
    for row in rows.tolist():
        entry, partner = int(rows_entry[row]), int(pairs.golden[row])
        if partner >= 0:
            suffix = golden.name[partner][len(golden.entry_names[g_entry[partner]]):]
        else:
            suffix = target.name[pairs.target[row]][len(target.entry_names[entry]):]
        right = partners.get(int(t_forward[entry]), ())
        found = -1
        if len(right) == 1:
            found = g_items.get(_backward_twin(golden.entry_names[next(iter(right))]) + suffix, -1)
        elif not right and partner >= 0:
            if claimed is None:
                claimed = _claimed(partners, t_forward)
            if g_forward[g_entry[partner]] >= 0 and int(g_forward[g_entry[partner]]) not in claimed:
                found = partner
        pairs.golden[row] = found


def _claimed(partners: dict, t_forward: np.ndarray) -> set:
    """The golden entries paired with a target forward that has a backward of its own. A backward whose forward
    has no partner keeps the partner of its order (backward renumbering) unless that golden backward's forward is
    one of these: then it belongs to another target call (a hand-written matmul in place of a Dense). Recomputed
    activations keep theirs: the forward runs again during backward and only that second call gets a backward,
    so the golden forward's partner (the first call) has none; so do calls whose forwards pair on neither side."""
    with_backward = set(t_forward[t_forward >= 0].tolist())
    return {golden for entry, found in partners.items() if entry in with_backward for golden in found}


def _forward_entries(items: Items) -> np.ndarray:
    """Per entry of a dump: the index of the forward entry of a backward entry, -1 for others or when the dump
    does not record that forward."""
    index = {name: k for k, name in enumerate(items.entry_names)}
    return np.fromiter((index.get(forward_twin(name), -1) if parts is not None and parts.direction == BACKWARD
                        else -1 for name, parts in zip(items.entry_names, items.entry_parts)),
                       dtype=np.int64, count=len(items.entry_names))


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
    rows = np.flatnonzero(candidates)
    if not len(rows):
        return
    t_rows, g_rows = pairs.target[rows].tolist(), pairs.golden[rows].tolist()
    differ = np.fromiter(map(ne, map(t_dtype.__getitem__, t_rows), map(g_dtype.__getitem__, g_rows)), dtype=bool,
                         count=len(rows))
    for row in rows[differ].tolist():
        if not dtype_rule_ok(t_dtype[pairs.target[row]], g_dtype[pairs.golden[row]], cross_framework):
            pairs.golden[row] = -1
