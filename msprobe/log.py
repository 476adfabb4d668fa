"""Logging set-up and the progress helper shared by every command."""

from __future__ import annotations

import logging
import os
import sys

from msprobe.names import printable

LOGGER_NAME = "msprobe"
_LEVELS = {"0": logging.DEBUG, "1": logging.INFO, "2": logging.WARNING, "3": logging.ERROR}


class _PrintableFilter(logging.Filter):
    """Every record of the msprobe logger carries its message with control characters escaped (names.printable),
    for msprobe's console handler and for any handler an API user attaches alike. The arguments of a message (the
    names and paths it shows) have their line ends escaped too, so that a name cannot forge a log line; the line
    ends of the message itself stay."""

    def filter(self, record) -> bool:
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            texts = [isinstance(arg, (str, os.PathLike)) and any(end in str(arg) for end in "\n\r") for arg in args]
            if any(texts):
                record.args = tuple(printable(arg) if text else arg for arg, text in zip(args, texts))
        message = record.getMessage()
        escaped = printable(message, keep_newlines=True)
        if escaped is not message:
            record.msg, record.args = escaped, ()
        return True


_FILTER = _PrintableFilter()


def get_logger() -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


class _StdoutHandler(logging.StreamHandler):
    """Writes to whatever sys.stdout is at the time of the record (redirections and test captures). A message
    shows names from dumps, which may hold terminal escape sequences or lone surrogates: every control character
    but the line end is written as a visible escape (`\\x1b`, `\\ud800`; names.printable)."""

    def emit(self, record):
        self.stream = sys.stdout
        super().emit(record)

    def format(self, record) -> str:
        return printable(super().format(record), keep_newlines=True)


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
