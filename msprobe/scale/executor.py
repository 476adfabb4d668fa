"""Run independent tasks (one rank of one step, one share of APIs) on a backend: processes on this machine or a
Ray cluster. One driver loop serves every backend and command: completed tasks of an earlier run are skipped
(resume.py), a task that fails in a way a second attempt can mend (its worker process lost or killed, a storage
error) is retried, one that fails for its input (an MsprobeError: invalid JSON, an empty construct.json...) or an
internal error is not; a task that fails is reported by its label while the others complete, and the results come
back in job order. Local worker processes die with the driver (Linux), even when it is killed with SIGKILL.

A worker is a module-level function `worker(job, options) -> result`; the job and the options are small picklable
dataclasses and so is the result, a summary (rows, errors, first divergence): each task reads its own input
files and writes its own result files, atomically, so nothing large crosses between processes or machines.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from msprobe.errors import MsprobeError
from msprobe.interrupts import HeldInterrupts
from msprobe.log import get_logger, progress
from msprobe.scale.resume import Resume, completed, marker_for
from msprobe.scale.task import BACKENDS, Backend, JobFailure, execute, failure_message


@dataclass
class Batch:
    results: list                    # per job, in job order: the worker's result or a JobFailure
    resumed: frozenset = frozenset()  # indices of jobs whose result comes from an earlier run's marker
    retried: frozenset = frozenset()  # indices of jobs that needed more than one attempt
    markers: list = dataclasses.field(default_factory=list)  # per job: its completion Marker (None: no resume)


def task_name(job) -> str:
    """The job's label without its brackets: `[step0/rank1] ` -> `step0/rank1`."""
    return str(getattr(job, "label", "") or "").strip().strip("[]").strip()


def check_backend(backend: Backend) -> None:
    """Fail early, in one line, when the backend cannot be used."""
    if backend.kind not in BACKENDS:
        raise MsprobeError(f"unknown backend {backend.kind!r} (choose from {', '.join(BACKENDS)}).")
    if backend.retries < 0:
        raise MsprobeError("--retries must be 0 or more.")
    if backend.kind == "ray":
        from msprobe.scale.ray_backend import check_reachable, import_ray

        import_ray()
        check_reachable(backend.address)


def run_tasks(worker: Callable, jobs: list, options, backend: Backend, resume: Resume | None = None,
              desc: str = "Ranks") -> Batch:
    """worker(job, options) for every job on the backend, results in job order. With `resume`, jobs completed by
    an earlier run are not run again and every completed job leaves its marker."""
    logger = get_logger()
    results: list = [None] * len(jobs)
    markers: list = [None] * len(jobs)
    resumed = set()
    if resume is not None:
        os.makedirs(os.path.join(resume.directory, "tasks"), exist_ok=True)
        for index, job in enumerate(jobs):
            markers[index] = marker_for(resume, worker, job, task_name(job) or str(index))
            earlier = completed(markers[index])
            if earlier is not None:
                results[index] = earlier
                resumed.add(index)
        if resumed:
            logger.info("%d of %d tasks were completed by an earlier run into this output directory and are not "
                        "run again (delete %s to recompute them).", len(resumed), len(jobs), resume.directory)
    todo = deque(i for i in range(len(jobs)) if i not in resumed)
    runner = _runner(backend, len(todo))
    inner = _share_cores(options, runner.parallel, backend.kind)
    attempts = [0] * len(jobs)
    bar = progress(total=len(jobs), desc=desc)
    bar.update(len(resumed))
    try:
        while todo or runner.busy():
            while todo and runner.room():
                index = todo.popleft()
                attempts[index] += 1
                runner.submit(index, jobs[index], (worker, jobs[index], inner, markers[index]))
            for index, result in runner.wait():
                if isinstance(result, JobFailure) and markers[index] is not None:
                    # a worker lost after its marker was written has finished all the same
                    result = completed(markers[index]) or result
                if isinstance(result, JobFailure) and result.retry and attempts[index] <= backend.retries:
                    logger.warning("%sattempt %d of %d failed, retrying: %s", _label(jobs[index]), attempts[index],
                                   backend.retries + 1, result.message)
                    todo.append(index)
                    continue
                if isinstance(result, JobFailure) and attempts[index] > 1:
                    result = JobFailure(result.label or _label(jobs[index]),
                                        f"{result.message.rstrip('.')} ({attempts[index]} attempts).", result.retry)
                results[index] = result
                bar.update(1)
    except KeyboardInterrupt:
        runner.cancel()
        finished = sum(r is not None and not isinstance(r, JobFailure) for r in results)
        logger.warning("Interrupted with %d of %d tasks complete%s.", finished, len(jobs),
                       "; run the same command again to continue" if resume is not None else "")
        raise
    finally:
        bar.close()
        runner.close()
    batch = Batch(results, frozenset(resumed), frozenset(i for i, n in enumerate(attempts) if n > 1), markers)
    if len(jobs) > 1 or batch.retried:
        logger.info("%s", outcome_line(batch, jobs, desc))
    return batch


def outcome_line(batch: Batch, jobs: list, desc: str = "Ranks") -> str:
    failed = [i for i, r in enumerate(batch.results) if isinstance(r, JobFailure)]
    line = (f"{desc}: {len(jobs) - len(failed)} of {len(jobs)} complete ({len(batch.resumed)} from an earlier run, "
            f"{len(batch.retried - set(failed))} after a retry)")
    if failed:
        line += f"; {len(failed)} failed: " + "; ".join(f"{task_name(jobs[i]) or i}: {batch.results[i].message}"
                                                         for i in failed[:5])
        if len(failed) > 5:
            line += f"; and {len(failed) - 5} more"
    return line


def _label(job) -> str:
    return getattr(job, "label", "") or ""


def _share_cores(options, processes: int, kind: str):
    """Tensor threads inside a task share the cores with the parallel tasks (one per Ray task)."""
    if not (dataclasses.is_dataclass(options) and any(f.name == "jobs" for f in dataclasses.fields(options))):
        return options
    if kind == "ray":
        return dataclasses.replace(options, jobs=1)
    if processes <= 1:
        return options
    return dataclasses.replace(options, jobs=max(1, options.jobs // processes))


def _runner(backend: Backend, tasks: int):
    if backend.kind == "ray":
        from msprobe.scale.ray_backend import RayRunner

        return RayRunner(backend)
    workers = max(1, min(backend.workers, tasks))
    if workers > 1 and multiprocessing.current_process().daemon:
        # a daemonic process (a multiprocessing.Pool worker calling the Python API) may not start processes
        get_logger().warning("This process is a daemonic worker process (multiprocessing.Pool), which cannot start "
                             "processes of its own: the %d tasks run one after the other in it (call msprobe from "
                             "a process that is not daemonic to run them side by side).", tasks)
        return InProcess()
    return InProcess() if workers == 1 else Processes(workers, backend.start_method)


class InProcess:
    """One task after the other in this process (one worker, or one task)."""

    parallel = 1

    def __init__(self):
        self._done: list = []

    def room(self) -> bool:
        return not self._done

    def busy(self) -> bool:
        return bool(self._done)

    def submit(self, index: int, job, call: tuple) -> None:
        self._done.append((index, execute(*call)))

    def wait(self) -> list:
        done, self._done = self._done, []
        return done

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


class Processes:
    """One process per task, at most `workers` at a time: a task that kills its process (signal, out of memory,
    os._exit) is known exactly and loses nothing but itself."""

    def __init__(self, workers: int, start_method: str | None):
        self.parallel = workers
        self._context = multiprocessing.get_context(start_method)
        self._running: dict = {}   # result pipe -> (index, job, process)

    def room(self) -> bool:
        return len(self._running) < self.parallel

    def busy(self) -> bool:
        return bool(self._running)

    def submit(self, index: int, job, call: tuple) -> None:
        reader, writer = self._context.Pipe(duplex=False)
        driver = None if self._context.get_start_method() == "forkserver" else os.getpid()
        process = self._context.Process(target=_child, args=(writer, call, driver), daemon=True,
                                        name=f"msprobe-task-{index}")
        held = HeldInterrupts()           # a Ctrl-C while forking is raised once the process is known (cancel())
        try:
            process.start()
        finally:
            held.restore()
        writer.close()
        self._running[reader] = (index, job, process)
        held.deliver()

    def wait(self) -> list:
        from multiprocessing.connection import wait

        done = []
        for reader in wait(list(self._running)):
            index, job, process = self._running.pop(reader)
            try:
                result = reader.recv()
            except (EOFError, OSError):
                result = None
            except Exception as exc:   # a result that cannot be unpickled
                result = JobFailure(_label(job), f"the result could not be read: {failure_message(exc)}")
            reader.close()
            process.join()
            if result is None:
                result = JobFailure(_label(job), f"worker process lost ({_exit_text(process.exitcode)})", True)
            done.append((index, result))
        return done

    def cancel(self) -> None:
        for _, _, process in self._running.values():
            process.terminate()

    def close(self) -> None:
        for reader, (_, _, process) in list(self._running.items()):
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
            reader.close()
        self._running.clear()


def _child(writer, call: tuple, driver: int | None) -> None:
    die_with(driver)
    signal.signal(signal.SIGINT, signal.default_int_handler)     # not the parent's while it forked (interrupts.py)
    try:
        result = execute(*call)
    except KeyboardInterrupt:   # Ctrl-C reaches the whole process group; the driver reports it
        os._exit(130)
    try:
        writer.send(result)
    except Exception as exc:   # an unpicklable result
        writer.send(JobFailure(_label(call[1]), f"the result could not be returned: {failure_message(exc)}"))
    writer.close()


PR_SET_PDEATHSIG = 1


def die_with(driver: int | None) -> None:
    """Have the kernel kill this worker process when its parent ends, however it ends (Linux; elsewhere a
    killed driver's workers finish their task and exit, as their result pipe is gone). `driver`: the parent's
    pid (None when the parent is a forkserver, which ends with the driver)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if driver is not None and os.getppid() != driver:   # the driver ended before prctl took effect
        os._exit(1)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
