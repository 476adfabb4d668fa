"""Logging set-up and the progress helper shared by every command."""

from __future__ import annotations

import logging
import os
import re
import sys

LOGGER_NAME = "msprobe"
_LEVELS = {"0": logging.DEBUG, "1": logging.INFO, "2": logging.WARNING, "3": logging.ERROR}


def get_logger() -> logging.Logger:
    return logging.getLogger(LOGGER_NAME)


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is at the time of the record (redirections and test captures); a lone
    surrogate in a message (a name from a dump with a `\\ud800` escape) is written as the text `\\ud800`."""

    def emit(self, record):
        self.stream = sys.stdout
        super().emit(record)

    def format(self, record) -> str:
        text = super().format(record)
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text


_SURROGATE = re.compile("[\ud800-\udfff]")


def setup_logging(take_over: bool = False) -> None:
    """Log lines `YYYY-mm-dd HH:MM:SS (pid) [LEVEL] message`; level from MSPROBE_LOG_LEVEL (0-3).

    The command line (take_over=True) owns its process's console: it adds its handler unless msprobe's own handler
    or the Python API's "quiet" NullHandler (msprobe/api.py) is there already; other handlers, such as the capture
    handlers pytest >= 9.2 attaches to non-propagating loggers, do not print to the console. A task (the default)
    sets up only a process whose msprobe logger has no handler at all (a spawned or Ray worker) and leaves what its
    caller configured (an API user's handler, an inherited one) alone."""
    logger = get_logger()
    if take_over:
        if any(isinstance(handler, (_StdoutHandler, logging.NullHandler)) for handler in logger.handlers):
            return
    elif logger.handlers:
        return
    handler = _StdoutHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s (%(process)d) [%(levelname)s] %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(_LEVELS.get(os.environ.get("MSPROBE_LOG_LEVEL", "1"), logging.INFO))
    logger.propagate = False


def progress(iterable=None, total=None, desc=""):
    """A tqdm bar on stderr when it is a terminal; a plain pass-through otherwise."""
    if not sys.stderr.isatty():
        return iterable if iterable is not None else _NullBar()
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False, dynamic_ncols=True)


class _NullBar:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
