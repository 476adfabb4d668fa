"""Workers for the failure tests: the real compare worker, except that the first attempt of one rank kills its own
worker process (a real worker death, as the out-of-memory killer would cause)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from msprobe.compare.batch import run_job

VICTIM = "_rank3"


def compare_or_die_once(job, options):
    flag = Path(options.output_dir) / f".killed{job.suffix}"
    if job.suffix == VICTIM and not flag.exists():
        flag.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return run_job(job, options)


def always_die(job, options):
    os.kill(os.getpid(), signal.SIGKILL)


def storage_hiccup_once(job, options):
    """The first attempt of every rank meets a transient storage error (EIO), the second compares."""
    import errno

    flag = Path(options.output_dir) / f".hiccup{job.suffix}"
    if not flag.exists():
        flag.write_text("1")
        raise OSError(errno.EIO, os.strerror(errno.EIO), job.target)
    return run_job(job, options)


def refuse(job, options):
    from msprobe.errors import MsprobeError

    flag = Path(options.output_dir) / f".refused{job.suffix}"
    flag.write_text(str(int(flag.read_text()) + 1 if flag.exists() else 1))
    raise MsprobeError(f"{job.target} is not a dump")
