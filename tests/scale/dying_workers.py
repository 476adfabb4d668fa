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
