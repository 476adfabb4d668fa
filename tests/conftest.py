"""Shared test helpers: fixture paths, running the CLI in-process, reading result tables."""

from __future__ import annotations

import csv
import errno
import gzip
import json
import os
import tarfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_pair(case: str) -> tuple[str, str]:
    base = FIXTURES / case
    return str(base / "target" / "dump.json"), str(base / "golden" / "dump.json")


def read_csv(path) -> list:
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def run_cli(args: list) -> int:
    from msprobe.cli.main import main

    return main([str(a) for a in args])


def device_rows(directory, devices=(0, 1), kind: str = "result") -> list:
    """The rows (without header) of multi_acc_check's accuracy_checking_<kind>_*_device<id>.csv, per device id."""
    return [read_csv(only_file(directory, f"accuracy_checking_{kind}_*_device{d}.csv"))[1:] for d in devices]


def in_dump_order(single_rows: list, per_device: list) -> list:
    """The union of the devices' rows in the order of a single acc_check run's rows; each device's rows must be in
    that order already."""
    position = {row[0]: i for i, row in enumerate(single_rows)}
    for rows in per_device:
        assert [position[row[0]] for row in rows] == sorted(position[row[0]] for row in rows)
    return sorted((row for rows in per_device for row in rows), key=lambda row: position[row[0]])


def ctrl_c_reaches_the_child() -> None:
    """preexec_fn of a child a test interrupts with SIGINT: Ctrl-C's default action, even when this test run was
    started in the background of a shell without job control (which starts it with SIGINT ignored, an ignore a child
    inherits and Python keeps)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_after_markers(args: list, markers: Path, count: int) -> tuple:
    """Run `msprobe <args>` in its own process and interrupt it (SIGINT, as Ctrl-C) as soon as `markers` holds
    `count` completion markers of its tasks; (exit code, stdout, stderr)."""
    import signal
    import subprocess
    import sys
    import time

    driver = subprocess.Popen([sys.executable, "-m", "msprobe", *[str(a) for a in args]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_the_child)
    try:
        deadline = time.monotonic() + 120
        while not (markers.is_dir() and len(list(markers.glob("*.json"))) >= count):
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.005)
        driver.send_signal(signal.SIGINT)
        printed, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    return driver.returncode, printed, err


def kill_acc_check_run(out, done: int, partial: bytes) -> tuple:
    """Make a finished acc_check run in `out` look killed after `done` APIs, in the middle of writing the details
    of the next one (its first output row cut after `partial`). Returns (result path, details path, full result
    bytes, full details bytes)."""
    result_path = only_file(out, "accuracy_checking_result_*.csv")
    details_path = only_file(out, "accuracy_checking_details_*.csv")
    full_result, full_details = result_path.read_bytes(), details_path.read_bytes()
    lines = full_result.split(b"\r\n")
    result_path.write_bytes(b"\r\n".join(lines[:done + 1]) + b"\r\n")
    missing = lines[done + 1].split(b",")[0] + b".forward.output.0"
    details_path.write_bytes(full_details[:full_details.index(missing)] + missing + partial)
    return result_path, details_path, full_result, full_details


def without_framework(dump: Path, tmp_path: Path) -> tuple[dict, Path]:
    """(the dump's content without its "framework" key, a copy of the dump holding it), for bad-input tests."""
    content = json.loads(Path(dump).read_text())
    del content["framework"]
    path = tmp_path / "noframework.json"
    path.write_text(json.dumps(content))
    return content, path


def only_file(directory, pattern: str) -> Path:
    found = sorted(Path(directory).glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {directory}, found {[p.name for p in found]}"
    return found[0]


def skip_without_torch(why: str) -> None:
    """Skip the calling test, naming why it needs torch, when torch cannot be imported."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip(f"torch is not installed (pip install torch==2.13.0): {why}")


@pytest.fixture(scope="session")
def tensor_mix(tmp_path_factory) -> tuple[str, str]:
    """The real tensor-mode dump pair (.pt files), extracted once per session; without torch, which reads .pt
    files, the tests using it are skipped."""
    skip_without_torch("the tensor_mix dumps hold .pt files")
    base = tmp_path_factory.mktemp("tensor_mix")
    for side in ("target", "golden"):
        with tarfile.open(FIXTURES / "tensor_mix_step0" / f"{side}.tar.gz") as archive:
            archive.extractall(base, filter="data")
    paths = []
    for side in ("target", "golden"):
        step = base / side / "step0"
        (proc,) = [p for p in step.iterdir() if p.is_dir()]
        paths.append(str(proc / "dump.json"))
    return paths[0], paths[1]


@pytest.fixture(autouse=True)
def _quiet_cwd(tmp_path, monkeypatch):
    """Run every test in its own directory so a default ./output never lands in the repository."""
    monkeypatch.chdir(tmp_path)
    os.environ.pop("MSPROBE_DEBUG", None)


@pytest.fixture(scope="session")
def multirank_step0(tmp_path_factory) -> tuple[Path, Path]:
    """The real 4-rank step0 folders (target, golden), extracted once per session."""
    base = tmp_path_factory.mktemp("multirank")
    with tarfile.open(FIXTURES / "multirank_step0.tar.gz") as archive:
        archive.extractall(base, filter="data")
    return base / "target" / "step0", base / "golden" / "step0"


@pytest.fixture
def msprobe_records(monkeypatch) -> list:
    """The log records of the msprobe logger during one test, whatever earlier tests of the session did with its
    handlers and propagation (where the records are printed depends on that; that they are emitted does not)."""
    import logging

    records: list = []
    counter = logging.Handler()
    counter.emit = records.append
    logger = logging.getLogger("msprobe")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, counter])
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(logger, "disabled", False)
    return records


def count_records(records: list, text: str) -> int:
    return sum(text in record.getMessage() for record in records)


class FullDisk:
    """A disk with `free` bytes left, in place of the writes and allocations of msprobe.collect.writer: a write
    into space the file holds already (posix_fallocate) succeeds, one beyond it takes free bytes (a short write,
    then ENOSPC)."""

    def __init__(self, monkeypatch, free: int):
        import msprobe.collect.writer as writer_module

        self.free = free
        self.refused = 0                     # allocations and writes that failed with ENOSPC
        self.real_write = os.write
        monkeypatch.setattr(writer_module, "_write", self.write)
        monkeypatch.setattr(writer_module, "_allocate", self.allocate)

    def _grow(self, fd, end: int) -> int:
        return max(0, end - os.fstat(fd).st_size)

    def allocate(self, fd, offset: int, length: int) -> None:
        grow = self._grow(fd, offset + length)
        if grow > self.free:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self.free -= grow
        if grow:                        # as posix_fallocate: the file grows (here sparse, on any file system)
            os.ftruncate(fd, offset + length)

    def write(self, fd, data) -> int:
        at = os.lseek(fd, 0, os.SEEK_CUR)
        grow = self._grow(fd, at + len(data))
        if grow and not self.free:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        size = len(data) - max(0, grow - self.free)
        self.free -= min(grow, self.free)
        return self.real_write(fd, bytes(data[:size]))


@pytest.fixture
def fresh_logger():
    """main() installs its log handler once, on the sys.stdout of that moment: drop it around a test that reads
    the command's output with capsys."""
    import logging

    logger = logging.getLogger("msprobe")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    yield
    for handler in list(logger.handlers):
        logger.removeHandler(handler)


def pytest_sessionfinish(session, exitstatus):
    """The debuggers that tests made would name their dump roots at interpreter exit (one line each, after pytest's
    closing line): a test session is not a training run, so they are forgotten here."""
    import sys

    debugger = sys.modules.get("msprobe.collect.debugger")
    if debugger is not None:
        debugger._REPORTED.clear()


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core, at most 4 (each worker imports torch or mindspore and
    trains small models; more workers add memory, not speed, on the few cores a CI machine has)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
