"""Many compare jobs (ranks, steps) as tasks of the scale-out executor: one failing job never stops the others, and a
re-run into the same output directory resumes (msprobe/scale/)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from msprobe.compare.pipeline import CompareOptions, compare_files, timestamp
from msprobe.dump.locate import Job
from msprobe.scale.executor import Backend, JobFailure, run_tasks
from msprobe.scale.resume import resume_in, run_stamp

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
    driver assembles one output from all jobs). The run's timestamp is the earlier run's when the same settings
    were used there (recomputed jobs then replace their own partial files); the options with that timestamp are
    returned for the files the driver writes."""
    stamp = options.stamp or timestamp()
    resume = resume_in(options.output_dir, kind, replace(options, jobs=0, stamp=""), outputs) if resumable else None
    options = replace(options, stamp=run_stamp(resume, stamp) if resume else stamp)
    return run_tasks(worker, jobs, options, backend, resume, desc), options


def succeeded(results: list) -> list:
    return [r for r in results if not isinstance(r, JobFailure)]
