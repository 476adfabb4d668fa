"""How one cell value is spelled in a result table (shared by the measures and every writer)."""

from __future__ import annotations

import math

NA = "N/A"


def cell_text(value) -> str:
    """Python text of a value, with NaN as `Nan`, infinities as `inf`/`-inf` and null as `None`."""
    kind = type(value)
    if kind is str:
        return value
    if kind is float:
        if value != value:
            return "Nan"
        return repr(value)
    if value is None:
        return "None"
    if isinstance(value, float):  # numpy floats
        return cell_text(float(value))
    return str(value)


def column_texts(values: list, spell=cell_text) -> list:
    """Texts of a column: strings as they are, finite floats by repr, everything else by spell."""
    return [v if (kind := type(v)) is str else repr(v) if kind is float and v - v == 0 else spell(v)
            for v in values]


def is_number(value) -> bool:
    """True for a finite or infinite real number that is not a bool."""
    kind = type(value)
    return (kind is int or kind is float) and kind is not bool


def number_or_none(value) -> float | None:
    """Parse a cell into a float where it holds a number (`12.5%` -> 0.125); None otherwise."""
    kind = type(value)
    if kind is float or kind is int:
        return float(value)
    if kind is str:
        text = value.strip()
        scale = 1.0
        if text.endswith("%"):
            text, scale = text[:-1], 0.01
        try:
            number = float(text)
        except ValueError:
            return None
        return number * scale if not math.isnan(number) else None
    return None
