"""Argument types shared by the commands' parsers."""

from __future__ import annotations

import argparse


def int_at_least(minimum: int):
    """An argparse type: an integer >= minimum, refused with one line otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse
