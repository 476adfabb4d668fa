"""The Ray backend: every task is a Ray task of one CPU on the cluster (an existing one, or a local instance started
for the run); Ray itself does not retry, the driver loop in executor.py does."""

from __future__ import annotations

import logging
import os
import socket

from msprobe.errors import MsprobeError
from msprobe.names import counter
from msprobe.optional import require
from msprobe.scale.task import Backend, JobFailure, execute

# Environment of the run's Ray workers: one BLAS thread per task (as for local processes), the driver's log level.
WORKER_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def import_ray():
    return require("ray", "--backend ray")


class RayRunner:
    """Submits every task at once (Ray queues them by free CPUs) and hands back finished ones."""

    def __init__(self, backend: Backend):
        self._ray = ray = import_ray()
        self._connected = False
        if not ray.is_initialized():
            self._connected = connect(ray, backend.address, backend.workers)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(execute)
        self._pending: dict = {}   # object ref -> (index, job)
        self.parallel = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def room(self) -> bool:
        return True

    def busy(self) -> bool:
        return bool(self._pending)

    def submit(self, index: int, job, call: tuple) -> None:
        self._pending[self._remote.remote(*call)] = (index, job)

    def wait(self) -> list:
        ray = self._ray
        ready, _ = ray.wait(list(self._pending), num_returns=1)
        done = []
        for ref in ready:
            index, job = self._pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:   # worker or node lost, task cancelled, out of memory
                result = JobFailure(getattr(job, "label", ""), f"Ray task failed: {_first_line(exc)}", True)
            done.append((index, result))
        return done

    def cancel(self) -> None:
        # Not ray.cancel: a forced cancel racing with the task's completion can abort the driver inside Ray. The
        # tasks end with the run's Ray job (close() or the driver's exit); one that finishes first has written its
        # result files and marker, which a re-run uses.
        self._pending.clear()

    def close(self) -> None:
        if self._connected:
            self._ray.shutdown()


def connect(ray, address: str, cpus: int) -> bool:
    """Connect to the cluster at `address`; "auto" falls back to starting a local instance with `cpus` CPUs.
    Returns True: this run initialised Ray and disconnects (or stops its local instance) at the end."""
    env = {name: os.environ.get(name, "1") for name in WORKER_ENV}
    env["MSPROBE_LOG_LEVEL"] = os.environ.get("MSPROBE_LOG_LEVEL", "1")
    if os.environ.get("MSPROBE_DEBUG"):          # tracebacks of internal errors inside tasks
        env["MSPROBE_DEBUG"] = os.environ["MSPROBE_DEBUG"]
    options = {"runtime_env": {"env_vars": env}, "logging_level": logging.WARNING}
    if address in ("", "auto"):
        try:
            ray.init(address="auto", **options)
        except ConnectionError:
            ray.init(num_cpus=max(1, cpus), include_dashboard=False, **options)
        return True
    check_reachable(address)
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise MsprobeError(f"cannot connect to the Ray cluster at {address}: {_first_line(exc)}") from None
    return True


def check_reachable(address: str) -> None:
    """A host:port that does not answer fails in seconds instead of Ray's long connection retries."""
    if address in ("", "auto") or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    number = counter(port)
    if number is None:
        return
    try:
        socket.create_connection((host.strip("[]"), number), timeout=5).close()
    except OSError as exc:
        raise MsprobeError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}.") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
