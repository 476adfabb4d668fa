"""Many compare jobs (ranks, steps) as tasks of the scale-out executor: one failing job never stops the others, and a
re-run into the same output directory resumes (msprobe/scale/)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace

from msprobe.compare.pipeline import CompareOptions, compare_files
from msprobe.dump.locate import Job
from msprobe.report.atomic import remove_stale_temporaries
from msprobe.scale.executor import Backend, JobFailure, run_tasks
from msprobe.scale.resume import resume_in, run_stamp
from msprobe.scale.stamp import claim_stamp, remove_stale_locks

__all__ = ["JobFailure", "run_job", "run_batch", "summary_files", "succeeded"]


def run_job(job: Job, options: CompareOptions):
    """Compare one job into <output>/<out_subdir>; user errors become a JobFailure instead of an exception."""
    output_dir = os.path.join(options.output_dir, job.out_subdir) if job.out_subdir else options.output_dir
    return compare_files(job.target, job.golden, replace(options, output_dir=output_dir), job.suffix, job.label)


def summary_files(summary) -> list:
    """The files a table compare wrote: table, advisor, html page."""
    return [summary.output, summary.advisor_file, summary.html_file]


def run_batch(jobs: list, options, backend: Backend, worker: Callable = run_job, kind: str = "compare",
              outputs: Callable = summary_files, desc: str = "Ranks", resumable: bool = True) -> tuple:
    """Run `worker` over the jobs on the backend with resume under options.output_dir (unless not resumable: the
    driver assembles one output from all jobs). The run's timestamp is the earlier run's when the same jobs
    were run with the same settings there (recomputed jobs then replace their own partial files), else one that
    no other file in the output directories carries (scale/stamp.py); the options with that timestamp are
    returned for the files the driver writes. Temporaries that killed runs left in those directories go first."""
    directories = output_directories(options.output_dir, jobs)
    resume = resume_in(options.output_dir, kind, replace(options, jobs=0, stamp=""), outputs, jobs) \
        if resumable else None
    clean_directories(directories + ([os.path.join(resume.directory, d) for d in ("runs", "tasks")] if resume
                                     else []))
    if options.stamp:
        stamp = options.stamp
    elif resume is not None:
        stamp = run_stamp(resume, lambda: claim_stamp(directories))
    else:
        stamp = claim_stamp(directories)
    options = replace(options, stamp=stamp)
    return run_tasks(worker, jobs, options, backend, resume, desc), options


def output_directories(output_dir: str, jobs: list) -> list:
    """The output directory and the subdirectories the jobs write to (step0/...)."""
    subdirs = sorted({job.out_subdir for job in jobs if getattr(job, "out_subdir", "")})
    return [output_dir] + [os.path.join(output_dir, subdir) for subdir in subdirs]


def clean_directories(directories: list) -> None:
    """Remove the temporaries and timestamp claims that runs of msprobe killed before this one left in the
    directories (directories[0]: the output directory)."""
    started = time.time()
    for directory in directories:
        remove_stale_temporaries(directory, started)
    remove_stale_locks(directories[0])


def succeeded(results: list) -> list:
    return [r for r in results if not isinstance(r, JobFailure)]
