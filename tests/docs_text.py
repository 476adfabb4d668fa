"""Reading the docs in tests: their code blocks, and whether the log lines a doc quotes are what the command prints.

A quoted line is a pattern: `...`, `(...)` or `…` stands for any text, a 14-digit stamp or `<ts>` for any stamp, a
`<placeholder>` for any text and a token with a `/` for any path; everything else, every figure included, must be
printed as quoted. So a doc that quotes a count the command no longer gives fails its test."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_WILDCARDS = re.compile(r"(\(\.\.\.\)|\.\.\.|…|<ts>|\d{14}|<[a-z][a-z ]*>|\S*/\S*)")


def _fenced(text: str) -> list:
    """(position of the opening fence, language, content) of every fenced code block, in order."""
    blocks = []
    fence = re.compile(r"^```(\S*)[ \t]*$", re.M)
    at = 0
    while True:
        opening = fence.search(text, at)
        if opening is None:
            return blocks
        closing = re.compile(r"^```[ \t]*$", re.M).search(text, opening.end())
        assert closing is not None, "an unclosed code block"
        blocks.append((opening.start(), opening.group(1), text[opening.end() + 1:closing.start()]))
        at = closing.end()


def code_blocks(path: Path, language: str = "") -> list:
    """The fenced code blocks of a markdown file with this language tag ("" for untagged blocks)."""
    return [content for _, tag, content in _fenced(path.read_text(encoding="utf-8")) if tag == language]


def blocks_after(path: Path, marker: str, language: str = "") -> list:
    """The code blocks with this language tag after the first occurrence of `marker` in the file."""
    text = path.read_text(encoding="utf-8")
    at = text.index(marker)
    return [content for start, tag, content in _fenced(text) if start > at and tag == language]


def line_pattern(quoted: str) -> re.Pattern:
    parts = []
    for piece in _WILDCARDS.split(quoted.strip()):
        if not piece:
            continue
        if piece in ("(...)", "...", "…") or re.fullmatch(r"<[a-z][a-z ]*>", piece):
            parts.append(".*?")
        elif piece == "<ts>" or re.fullmatch(r"\d{14}", piece):
            parts.append(r"\d{14}")
        elif "/" in piece:
            parts.append(r"\S+")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + r"\s*$")


def missing_lines(quoted_lines, printed: str) -> list:
    """The quoted lines that no printed line matches (each with the printed lines that share its first words)."""
    printed_lines = printed.splitlines()
    missing = []
    for quoted in quoted_lines:
        pattern = line_pattern(quoted)
        if not any(pattern.search(line) for line in printed_lines):
            head = re.sub(r"^\[\w+\]\s*", "", quoted.strip()).split(":")[0][:30]
            near = [line for line in printed_lines if head and head in line][:3]
            missing.append(f"quoted: {quoted.strip()}\n  printed: {near or '(nothing alike)'}")
    return missing


def log_lines(block: str) -> list:
    """The lines of a quoted log: those starting with [INFO], [WARNING], [ERROR] or `...`."""
    return [line for line in block.splitlines() if re.match(r"\s*(\[(INFO|WARNING|ERROR)\]|\.\.\. )", line)]


def text_pattern(quoted: str) -> re.Pattern:
    """A quoted output block as one pattern, whitespace (line breaks, table alignment) normalised."""
    return re.compile(line_pattern(" ".join(quoted.split())).pattern.removesuffix(r"\s*$"))


def missing_blocks(quoted_blocks, printed: str) -> list:
    """The quoted output blocks that the printed text does not hold (whitespace normalised)."""
    flat = " ".join(printed.split())
    return [block for block in quoted_blocks if not text_pattern(block).search(flat)]
