"""Names from a dump or a model are data: how one is shown as text, and how a counter inside one is read.

A name (an entry, a rank folder, a stack line) may hold anything a JSON string can: ESC and OSC sequences that
retitle a terminal or write its clipboard, carriage returns that overwrite a line, lone surrogates, digits of
other scripts. Every console line, log line and text file of msprobe shows names through `printable`, and every
counter taken from a name is read with `counter`.
"""

from __future__ import annotations

import re

# C0 and C1 control characters and DEL, the bidirectional overrides and isolates (which reorder what a terminal
# shows), the zero-width characters (which make two different names look alike), the line and paragraph
# separators, and lone surrogates (which UTF-8 cannot hold).
_OTHERS = "\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x1f{_OTHERS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHERS}]")
LONGEST_LINE = 2000     # characters of an error line; a longer one (a name of thousands) keeps its two ends
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text, keep_newlines: bool = False) -> str:
    """`text` with every control character written as a visible escape (`\\x1b`, `\\r`, `\\u202e`); nothing else
    changes. keep_newlines: line ends stay (a multi-line message or file); every other control is escaped."""
    text = text if isinstance(text, str) else str(text)
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_escape, text) if pattern.search(text) else text


def error_line(text: str) -> str:
    """`text` as one error line: printable, and, when longer than LONGEST_LINE, its start and its end with the
    number of characters left out between them."""
    text = printable(text)
    if len(text) <= LONGEST_LINE:
        return text
    keep = LONGEST_LINE // 2
    return f"{text[:keep]} …({len(text) - 2 * keep} characters left out)… {text[-keep:]}"


def counter(text: str) -> int | None:
    """The number a counter inside a name spells in ASCII digits (`"12"` -> 12); None for anything else: `"²"`
    and `"٣"` pass str.isdigit() but are not counters of a dump."""
    return int(text) if text.isascii() and text.isdigit() else None
