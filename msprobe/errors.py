"""The one exception tree for errors a user can cause; the CLI prints them as one line."""


class MsprobeError(Exception):
    """An error caused by the input or the options; printed without a traceback, exit code 1."""

    exit_code = 1


class UsageError(MsprobeError):
    """Wrong command-line usage; exit code 2."""

    exit_code = 2


class DumpFormatError(MsprobeError):
    """A dump file (dump.json, stack.json, construct.json) is malformed or not a dump."""


class PathError(MsprobeError):
    """A path is missing, of the wrong kind, unsafe or not accessible."""


def os_error_text(exc: OSError) -> str:
    """An OSError in one line: `<why>: <file>` (disk full, read-only storage, a name too long...)."""
    files = [str(f) for f in (exc.filename, getattr(exc, "filename2", None)) if f]
    why = exc.strerror or str(exc) or type(exc).__name__
    return f"{why}: {' -> '.join(files)}" if files else why
