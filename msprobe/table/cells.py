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
    """Texts of a column: strings as they are, finite floats by repr, everything else by spell. A tensor's
    statistics recur on several rows (output of one op, input of the next), so float texts are cached;
    zeros are not, as -0.0 == 0.0 but their texts differ."""
    cache: dict = {}
    out = []
    append = out.append
    for value in values:
        kind = type(value)
        if kind is str:
            append(value)
        elif kind is float and value - value == 0 and value:
            text = cache.get(value)
            if text is None:
                text = cache[value] = repr(value)
            append(text)
        else:
            append(spell(value))
    return out


def is_number(value) -> bool:
    """True for a finite or infinite real number that is not a bool."""
    kind = type(value)
    return (kind is int or kind is float) and kind is not bool


def number_or_none(value) -> float | None:
    """The one parser of number cells: a number, or a text of one, as a float; a percent text as its fraction
    (`12.5%` -> 12.5 / 100 = 0.125); None for anything else (texts, bools, None, NaN)."""
    kind = type(value)
    if kind is float or kind is int:
        return None if value != value else float(value)
    if kind is str:
        text = value.strip()
        percent = text.endswith("%")
        try:
            number = float(text[:-1] if percent else text)
        except ValueError:
            return None
        if math.isnan(number):
            return None
        return number / 100 if percent else number
    return None
