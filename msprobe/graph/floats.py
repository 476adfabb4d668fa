"""Floats of the graph's parameter texts spelled many at once, a column at a time: each function gives quote + text
+ quote of every value of a list, equal to the per-value spelling of texts.py (text_json for the .vis, text_db for the
.vis.db; tests/graph/test_formatter.py checks every function against it on hard values). numpy rounds the values to
6 decimals as "%.6f" does (_six_decimals, between 1e-4 and 1e9, where repr has no exponent) or to 7 significant
digits as "%.6e" does (_seven_digits, most values where repr has one), and orjson writes the rounded numbers
(_joined); other values, and the few numpy cannot round surely, are spelled one after another (the *_each
functions). On the 20k-entry benchmark pair this spends 0.18 instead of 0.55 us per compare cell."""

from __future__ import annotations

from itertools import chain

import numpy as np
import orjson


def float_texts_json(values: list, quote: str = "") -> list:
    """text_json of floats: repr(round(v, 6)), which between 1e-4 and 1e9 is the 6-decimal text without its
    trailing zeros."""
    return _spelled(values, quote, _rounded_reprs, _float_texts_json_each)


def float_texts_db(values: list, quote: str = "") -> list:
    """text_db of floats: repr(v)."""
    return _spelled(values, quote, _plain_reprs, _float_texts_db_each)


def cell_texts_json(values: list, suffix: str, quote: str = "") -> list:
    """text_json(repr(v) + suffix) of floats: a decimal mantissa of 7 or more fraction digits is written with 6,
    the exponent and suffix kept."""
    return _spelled(values, quote, lambda v, q: _six_cells(v, suffix, q, json=True),
                    lambda some: _cell_texts_json_each(some, suffix))


def cell_texts_db(values: list, suffix: str, quote: str = "") -> list:
    """text_db(repr(v) + suffix) of floats: a plain decimal of 7 or more fraction digits is written with 6."""
    return _spelled(values, quote, lambda v, q: _six_cells(v, suffix, q, json=False),
                    lambda some: _cell_texts_db_each(some, suffix))


_FEW = 32           # fewer values are spelled one after another (numpy's fixed cost is higher)
_TENS = np.array([10.0 ** k for k in range(23)])        # the powers of ten a float holds exactly


def _spelled(values: list, quote: str, spell, each) -> list:
    """quote + text + quote of every float of values: spell(array, quote) gives [(rows, their texts)] of the rows
    it can spell, each(values) the texts of the others, one after another."""
    if len(values) < _FEW:
        return _quoted(each(values), quote)
    array = np.array(values, dtype=np.float64)
    parts = [(rows, texts) for rows, texts in spell(array, quote) if texts]
    if len(parts) == 1 and len(parts[0][1]) == len(values):
        return parts[0][1]
    left = np.ones(len(array), dtype=bool)
    where = []
    for rows, _ in parts:
        where.append(np.flatnonzero(rows))
        left[rows] = False
    rest = np.flatnonzero(left)
    texts = list(chain.from_iterable(texts for _, texts in parts))
    if len(rest):
        texts += _quoted(each([values[i] for i in rest.tolist()]), quote)
    out = np.empty(len(array), dtype=object)
    out[np.concatenate(where + [rest])] = np.array(texts, dtype=object)       # one scatter of every text
    return out.tolist()


def _six_decimals(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|v| * 10^6 rounded to an integer as "%.6f" rounds the exact value, rows where that is sure): rows between
    1e-4 and 1e9 (the product is below 2^53, its error below half its spacing) whose product is not within two
    spacings of a half (the exact product could lie on the other side; exact ties round to even in "%.6f")."""
    size = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        sure = (size >= 1e-4) & (size < 1e9)
        product = size * 1e6
        whole = np.floor(product)
        part = product - whole          # exact (whole and product are within a factor 2)
        sure &= np.abs(part - 0.5) > 2 * np.spacing(product)
    return whole + (part > 0.5), sure


def _seven_digits(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(M, e, exact, sure): |v| rounded to 7 significant digits as "%.6e" rounds the exact value, M * 10^(e - 6)
    with 10^6 <= M < 10^7; whether that decimal reads back as v; the rows where all this is sure. Those are rows
    between 1e-15 and 1e-4 or 1e16 and 1e27 (one multiplication or division by an exact power of ten takes them
    to the 7 digits, correctly rounded) whose scaled value is not within eight spacings of a half."""
    size = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        sure = ((size >= 1e-15) & (size < 1e-4)) | ((size >= 1e16) & (size < 1e27))
        size = np.where(sure, size, 1e-10)
        exponent = np.floor(np.log10(size)).astype(np.int64)
        for _ in range(2):              # log10 may be one off next to a power of ten
            scaled = _scale(size, 6 - exponent)
            exponent += (scaled >= 1e7).astype(np.int64) - (scaled < 1e6)
        scaled = _scale(size, 6 - exponent)
        whole = np.floor(scaled)
        part = scaled - whole
        sure &= (scaled >= 1e6) & (scaled < 1e7) & (np.abs(part - 0.5) > 8 * np.spacing(scaled))
        digits = whole + (part > 0.5)
        carry = digits >= 1e7           # 9999999.5 and up: 1.000000 of the next power
        digits[carry] = 1e6
        exponent += carry
        exact = _scale(digits, exponent - 6) == size
    return digits, exponent, exact, sure


def _scale(values: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """values * 10^powers, each one correctly rounded operation (|powers| <= 22)."""
    ten = _TENS[np.minimum(np.abs(powers), 22)]
    return np.where(powers >= 0, values * ten, values / ten)


def _rounded_reprs(v: np.ndarray, quote: str) -> list:
    """float_texts_json: repr(round(v, 6)) between 1e-4 and 1e9 (the float nearest to the 6-decimal text is the
    exact quotient, correctly rounded), "%.6e" where repr has an exponent."""
    scaled, sure = _six_decimals(v)
    parts = [(sure, _joined(np.copysign(scaled[sure] / 1e6, v[sure]), "", quote))]
    digits, exponent, _, sure = _seven_digits(v)
    return parts + _by_exponent(sure, digits, exponent, v, "", quote, padded=True)


def _plain_reprs(v: np.ndarray, quote: str) -> list:
    """float_texts_db: repr(v) between 1e-4 and 1e9."""
    size = np.abs(v)
    with np.errstate(invalid="ignore"):
        rows = (size >= 1e-4) & (size < 1e9)
    return [(rows, _joined(v[rows], "", quote))]


def _six_cells(v: np.ndarray, suffix: str, quote: str, json: bool) -> list:
    """cell_texts_json and cell_texts_db: between 1e-4 and 1e9, repr(v) + suffix where "%.6f" reads back as v (repr is that text
    without its trailing zeros), else (below 1e8) the 6-decimal text + suffix (repr has 7 or more fraction
    digits). Where repr has an exponent: repr(v) where "%.6e" reads back as v (at most 7 digits); else, in the .vis
    spelling, the 7 digits with the exponent of repr, which is the exponent of v but where the digits are 1.000000
    (repr may have 9.99999999... and the power below; those rows, few, are left to the per-value spelling)."""
    scaled, sure = _six_decimals(v)
    with np.errstate(invalid="ignore"):
        exact = sure & (np.copysign(scaled / 1e6, v) == v)
        rounded = sure & ~exact & (np.abs(v) < 1e8)
    parts = [(exact, _joined(v[exact], suffix, quote)),
             (rounded, _joined(np.copysign((scaled[rounded] * 10 + 1) / 1e7, v[rounded]), suffix, quote, True))]
    digits, exponent, exact, sure = _seven_digits(v)
    parts += _by_exponent(sure & exact, digits, exponent, v, suffix, quote, padded=False)
    if json:
        parts += _by_exponent(sure & ~exact & (digits > 1e6), digits, exponent, v, suffix, quote, padded=True)
    return parts


def _by_exponent(rows: np.ndarray, digits: np.ndarray, exponent: np.ndarray, v: np.ndarray, suffix: str,
                 quote: str, padded: bool) -> list:
    """[(rows, texts)] of the rows of _seven_digits, one part per exponent: the mantissa with 6 decimals (padded) or
    as repr writes it (without trailing zeros, no point when whole), then e, the sign and two or more digits."""
    parts = []
    signed = np.copysign(digits, v)
    for power in sorted(set(exponent[rows].tolist())):     # np.unique would import numpy.ma
        tail = "e%+03d%s" % (power, suffix)
        group = rows & (exponent == power)
        if padded:          # the 6 decimals followed by a 1, cut off by _joined
            parts.append((group, _joined((signed[group] * 10 + np.sign(signed[group])) / 1e7, tail, quote, True)))
            continue
        whole = group & (digits % 1e6 == 0)
        fraction = group & ~whole
        parts.append((whole, _joined((signed[whole] // 1e6).astype(np.int64), tail, quote)))
        parts.append((fraction, _joined(signed[fraction] / 1e6, tail, quote)))
    return parts


def _joined(numbers: np.ndarray, tail: str, quote: str, cut_one: bool = False) -> list:
    """quote + text + tail + quote of numbers as orjson writes them (floats between 1e-4 and 1e9 as repr does),
    each text without its last character, a 1, when cut_one; [] if orjson wrote something else (never seen: the
    rows are spelled one by one then). A float nearest to a decimal of at most 15 digits has that decimal as its
    shortest text: the decimal of 6 decimals and a 1 is written with all its zeros, and the 1 is cut off."""
    count = len(numbers)
    if not count:
        return []
    body = orjson.dumps(numbers, option=orjson.OPT_SERIALIZE_NUMPY).decode()[1:-1]
    comma = "1," if cut_one else ","
    if "e" in body or body.count(",") != count - 1 or body.count(comma) != count - 1 \
            or (cut_one and body[-1] != "1"):
        return []
    if cut_one:
        body = body[:-1]
    return (quote + body.replace(comma, tail + quote + "\x00" + quote) + tail + quote).split("\x00")


def _quoted(texts: list, quote: str) -> list:
    return [quote + text + quote for text in texts] if quote else texts


def _float_texts_json_each(values: list) -> list:
    out = []
    append = out.append
    for value in values:
        size = -value if value < 0 else value
        if 1e-4 <= size < 1e9:
            text = ("%.6f" % value).rstrip("0")
            append(text + "0" if text[-1] == "." else text)
        elif 0 < size < 1e-4 or 1e16 <= size < _INF:       # repr has an exponent
            append(f"{value:.6e}")
        else:
            append(repr(round(value, 6)))
    return out


def _float_texts_db_each(values: list) -> list:
    return [str(v) for v in values]


def _cell_texts_json_each(values: list, suffix: str) -> list:
    """Between 1e-4 and 1e9 repr has 7 or more fraction digits exactly when the 6-decimal text does not read back
    as the value; otherwise repr is that text without trailing zeros."""
    out = []
    append = out.append
    for value in values:
        size = -value if value < 0 else value
        if 1e-4 <= size < 1e9:
            text = "%.6f" % value
            if float(text) == value:
                text = text.rstrip("0")
                if text[-1] == ".":
                    text += "0"
            append(text + suffix)
            continue
        text = repr(value)
        dot = text.find(".")
        if dot >= 0:
            end = text.find("e", dot)
            if end < 0:
                if len(text) - dot > 7:
                    text = "%.6f" % value
            elif end - dot > 7:
                text = "%.6f" % float(text[:end]) + text[end:]
        append(text + suffix)
    return out


def _cell_texts_db_each(values: list, suffix: str) -> list:
    out = []
    for value in values:
        text = repr(value)
        dot = text.find(".")
        if dot >= 0 and "e" not in text and len(text) - dot > 7:
            text = f"{value:.6f}"
        out.append(text + suffix)
    return out



_INF = float("inf")
