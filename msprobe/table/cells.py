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
    """Texts of a column: strings as they are, finite floats by repr (table/floats.py: the floats of a column at
    once), everything else by spell."""
    kinds = set(map(type, values))
    if float not in kinds:
        if kinds <= _STR:
            return list(values)
        if kinds == _BOOL:
            return list(map(_BOOL_TEXTS.__getitem__, values))
        return [v if v.__class__ is str else spell(v) for v in values]
    from msprobe.table.floats import column_texts as with_floats

    return with_floats(values, spell)


_STR = {str}
_BOOL = {bool}
_BOOL_TEXTS = {True: "True", False: "False"}


def is_number(value) -> bool:
    """True for a finite or infinite real number that is not a bool."""
    kind = type(value)
    return (kind is int or kind is float) and kind is not bool


def stat_number(value) -> float | None:
    """The one parser of a number as a dump records it or a table holds it: a float as it is (NaN and the
    infinities included); an int as a float, +-inf beyond the float range (a JSON integer such as 1 followed by
    400 zeros); a text as the float it spells (`1.5`, ` inf`, `Infinity`, `-Infinity`, `1e999`, `nan`); None for
    anything else (other texts, bools, None). Every non-finite spelling is thereby the same value, with the same
    verdict."""
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if kind is str:
        try:
            return float(value)
        except ValueError:
            return None
    if kind is not bool and isinstance(value, (int, float)):     # numpy scalars
        return stat_number(float(value) if isinstance(value, float) else int(value))
    return None


def number_or_none(value) -> float | None:
    """A number cell as a float: stat_number, with a percent text as its fraction (`12.5%` -> 12.5 / 100 =
    0.125); None for anything else and for NaN."""
    if type(value) is str:
        text = value.strip()
        percent = text.endswith("%")
        number = stat_number(text[:-1] if percent else text)
        if number is not None and percent:
            number /= 100
    else:
        number = stat_number(value)
    return None if number is None or number != number else number
