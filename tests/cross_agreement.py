"""Whether the rows a cross-framework compare pairs agree: the fixture's MindSpore and PyTorch runs are numerically
identical, so a correct pairing shows equal statistics (tests/compare/test_cross_framework.py, docs/cross_framework.md
§9 and its test)."""

from __future__ import annotations


def _number(text):
    try:
        return float(text)
    except ValueError:
        return None


def agreement(table: list) -> tuple[int, int]:
    """(matched rows, matched rows whose statistics agree). The two models are numerically identical, so a
    matched row agrees when max/min/mean differ by at most 1e-4 of the tensor's range and the norms by 1e-4
    relative; a statistic one framework does not record (the norm of an int tensor) is skipped."""
    header = table[0]
    matched = agree = 0
    for row in table[1:]:
        if row[1] == "N/A":
            continue
        matched += 1
        values = {s: (_number(row[header.index("NPU " + s)]), _number(row[header.index("Bench " + s)]))
                  for s in ("max", "min", "mean", "l2norm")}
        scale = max([abs(v) for s in ("max", "min") for v in values[s] if v is not None] + [1e-12])
        ok = True
        for stat, (a, b) in values.items():
            if a is None or b is None:
                if stat in ("max", "min") and (a is None) != (b is None):
                    ok = False
                continue
            reference = max(abs(a), abs(b), 1e-12) if stat == "l2norm" else scale
            ok = ok and abs(a - b) <= 1e-4 * reference
        agree += ok
    return matched, agree
