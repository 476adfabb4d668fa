"""What one task is and how it runs: the Backend it runs on, the JobFailure it may end in, and `execute`, one
attempt of it in whichever process runs it. The driver loop (executor.py) and the Ray backend (ray_backend.py) both
build on this module."""

from __future__ import annotations

import errno
import gc
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from msprobe.errors import MsprobeError, os_error_text
from msprobe.log import get_logger, setup_logging
from msprobe.scale.resume import Marker

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class Backend:
    """Where the tasks run and how failures are handled (the CLI's --backend, --ray-address, --retries, -j)."""

    kind: str = "local"              # "local": processes on this machine; "ray": tasks on a Ray cluster
    workers: int = 1                 # local: parallel processes (1: one task after the other in this process)
    address: str = "auto"            # ray: the cluster; "auto" is the running one, else a local instance
    retries: int = 2                 # further attempts of a task whose failure may pass on a second try
    start_method: str | None = None  # local processes: multiprocessing start method (None: the platform's)


@dataclass
class JobFailure:
    """A task that failed: its label, one line saying why, and whether another attempt may succeed (a worker
    lost, a storage error), unlike a failure caused by the input (an MsprobeError) or an internal error."""

    label: str
    message: str
    retry: bool = False


# OSErrors that may pass on a second attempt: storage or memory under pressure, a file server restarting
TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOMEM, errno.ESTALE,
                              errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOSPC})


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, MsprobeError):
        return str(exc)
    if isinstance(exc, OSError):
        return os_error_text(exc)
    return f"internal error: {type(exc).__name__}: {exc}"


def may_pass_again(exc: BaseException) -> bool:
    """Whether another attempt of a task that raised `exc` may succeed."""
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS)


def execute(worker: Callable, job, options, marker: Marker | None):
    """One attempt of one task, in whichever process runs it; errors become a JobFailure. On success the
    task's completion marker is written after its result files."""
    setup_logging()
    label = getattr(job, "label", "")
    # as the CLI does while a command runs (cli/main.py): a compare builds millions of small acyclic objects, which
    # the cyclic collector would scan again and again; a Ray worker process starts with it running
    collecting = gc.isenabled()
    gc.disable()
    try:
        result = worker(job, options)
    except Exception as exc:
        if os.environ.get("MSPROBE_DEBUG") and not isinstance(exc, MsprobeError):
            sys.stderr.write(f"{label}{''.join(traceback.format_exception(exc))}")
            sys.stderr.flush()
        return JobFailure(label, failure_message(exc), may_pass_again(exc))
    finally:
        if collecting:
            gc.enable()
    if marker is not None and not isinstance(result, JobFailure):
        try:
            marker.write(result)
        except (OSError, TypeError) as exc:   # the result stands; only a re-run would not skip it
            get_logger().warning("%scould not record the completion of this task: %s", label,
                                 failure_message(exc))
    return result
