"""Run many compare jobs (ranks, steps) in a process pool; one failing job never stops the others."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace

from msprobe.compare.pipeline import CompareOptions, compare_files
from msprobe.dump.locate import Job
from msprobe.errors import MsprobeError
from msprobe.log import progress, setup_logging


@dataclass
class JobFailure:
    label: str
    message: str


def run_job(job: Job, options: CompareOptions):
    """Compare one job; user errors become a JobFailure instead of an exception."""
    output_dir = os.path.join(options.output_dir, job.out_subdir) if job.out_subdir else options.output_dir
    try:
        return compare_files(job.target, job.golden, replace(options, output_dir=output_dir), job.suffix, job.label)
    except MsprobeError as exc:
        return JobFailure(job.label, str(exc))
    except OSError as exc:
        return JobFailure(job.label, f"{exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".strip(": "))


def run_jobs(jobs: list, options: CompareOptions, workers: int, worker=run_job, *extra) -> list:
    """worker(job, options, *extra) for every job, results in job order (failures as JobFailure); jobs run in
    parallel processes when there are several."""
    if len(jobs) == 1:
        return [worker(jobs[0], options, *extra)]
    workers = max(1, min(workers, len(jobs)))
    # Tensor threads share the cores with the rank processes.
    inner = replace(options, jobs=max(1, options.jobs // workers))
    results: list = [None] * len(jobs)
    bar = progress(total=len(jobs), desc="Ranks")
    if workers == 1:
        for index, job in enumerate(jobs):
            results[index] = worker(job, inner, *extra)
            bar.update(1)
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=setup_logging) as pool:
            futures = {pool.submit(worker, job, inner, *extra): index for index, job in enumerate(jobs)}
            for future in as_completed(futures):
                index = futures[future]
                try:
                    results[index] = future.result()
                except Exception as exc:  # a worker died (killed, out of memory): report, go on
                    results[index] = JobFailure(jobs[index].label, f"worker failed: {type(exc).__name__}: {exc}")
                bar.update(1)
    bar.close()
    return results


def succeeded(results: list) -> list:
    return [r for r in results if not isinstance(r, JobFailure)]
