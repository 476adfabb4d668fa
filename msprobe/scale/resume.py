"""Resume: a task that completes records it in a small marker, written atomically after its result files; a re-run
of the same command skips the tasks whose marker still matches and whose files are all there.

Layout, under the output directory:

    .msprobe_done/<kind>/runs/<run>.json          the timestamp of one run
    .msprobe_done/<kind>/tasks/<task>.<run>.json  per completed task: fingerprint, result files with sizes, summary

<run> is a digest of what makes the run: its settings, the msprobe version and every job with its input paths
(resolved), so that another run into the same directory (other steps, other dumps) has markers of its own and a
timestamp of its own, and never takes or replaces the results of an earlier one. A task counts as done only when its marker exists, its fingerprint (worker, task, settings, msprobe version, size
and modification time of the input files the task names) equals the new one, and every result file it lists exists
with the recorded size. The summary is kept as JSON of the worker's result dataclass and decoded only into
dataclasses of the msprobe package, so a marker can never run code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from msprobe import __version__
from msprobe.report.atomic import write_text

MARKER_DIR = ".msprobe_done"
FORMAT = 1
_STAMP = re.compile(r"^\d{14}$")


@dataclass(frozen=True)
class Resume:
    """Where a command keeps its markers and what must not change for an earlier result to count."""

    directory: str          # <output>/.msprobe_done/<kind>
    settings: object        # the command's options without per-run values (worker counts, timestamp)
    outputs: Callable       # result -> the files the task wrote; module level (it travels to the workers)
    run: str = ""           # digest of the settings, the version and the jobs


@dataclass(frozen=True)
class Marker:
    """One task's marker: built by the driver, written by the worker after the task's result files."""

    path: str
    fingerprint: str
    task: str
    outputs: Callable

    def write(self, result) -> None:
        files = [os.path.abspath(path) for path in self.outputs(result) if path]
        record = {"format": FORMAT, "task": self.task, "fingerprint": self.fingerprint,
                  "outputs": [[path, os.path.getsize(path)] for path in files], "result": encode(result)}
        write_text(self.path, json.dumps(record, ensure_ascii=False))


def resume_in(output_dir: str, kind: str, settings, outputs: Callable, jobs: list = ()) -> Resume:
    """Markers of the run of `jobs` with `settings` into output_dir (without jobs: the settings alone identify
    the run, e.g. they hold its timestamp)."""
    run = _digest({"format": FORMAT, "version": __version__, "settings": resolved(encode(settings)),
                   "jobs": [resolved(encode(job)) for job in jobs]})[:16]
    return Resume(os.path.join(output_dir, MARKER_DIR, kind), settings, outputs, run)


def run_stamp(resume: Resume, fresh: Callable[[], str]) -> str:
    """The timestamp of the earlier run of the same jobs and settings into this output directory (so that the
    files of recomputed tasks replace their partial predecessors), else fresh(), recorded for the next run."""
    path = os.path.join(resume.directory, "runs", resume.run + ".json")
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        if record.get("run") == resume.run and _STAMP.match(str(record.get("stamp"))):
            return record["stamp"]
    except (OSError, ValueError, AttributeError):
        pass
    stamp = fresh()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_text(path, json.dumps({"format": FORMAT, "run": resume.run, "stamp": stamp}))
    return stamp


def marker_for(resume: Resume, worker: Callable, job, task: str) -> Marker:
    identity = {"format": FORMAT, "version": __version__, "worker": f"{worker.__module__}.{worker.__qualname__}",
                "run": resume.run, "job": resolved(encode(job)), "settings": resolved(encode(resume.settings)),
                "inputs": _input_files(job)}
    name = re.sub(r"[^\w.-]+", "_", task).strip("_.")[:100] or "task"     # step0/rank1 -> step0_rank1
    path = os.path.join(resume.directory, "tasks", f"{name}.{resume.run}.json" if resume.run else name + ".json")
    return Marker(path, _digest(identity), task, resume.outputs)


def completed(marker: Marker):
    """The recorded result when the marker matches and all of its result files are complete, else None."""
    try:
        with open(marker.path, encoding="utf-8") as handle:
            record = json.load(handle)
        if record.get("fingerprint") != marker.fingerprint or record.get("task") != marker.task:
            return None
        for path, size in record["outputs"]:
            if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) != size:
                return None
        return decode(record["result"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError):
        return None


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def resolved(value):
    """An encoded job or settings with every text that names an existing path replaced by its real path: the
    same relative path from another working directory is another input."""
    if isinstance(value, str):
        return os.path.realpath(value) if value and os.path.exists(value) else value
    if isinstance(value, list):
        return [resolved(v) for v in value]
    if isinstance(value, dict):
        return {k: resolved(v) for k, v in value.items()}
    return value


def _input_files(job) -> list:
    """Size and modification time of every existing file the job names (its dump files)."""
    if not dataclasses.is_dataclass(job):
        return []
    found = []
    for field in dataclasses.fields(job):
        value = getattr(job, field.name)
        for path in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(path, str) and path and os.path.isfile(path):
                stat = os.stat(path)
                found.append([path, stat.st_size, stat.st_mtime_ns])
    return found


# JSON of results: dataclasses, tuples and dicts with keys other than plain texts are tagged.
_CLASS, _TUPLE, _ITEMS = "__dataclass__", "__tuple__", "__items__"


def encode(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {_CLASS: f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {_ITEMS: [[encode(k), encode(v)] for k, v in value.items()]}
    if hasattr(value, "item") and hasattr(value, "dtype"):   # a numpy scalar
        return encode(value.item())
    raise TypeError(f"cannot record a {type(value).__name__} in a completion marker")


def decode(value):
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if _CLASS in value:
        cls = _dataclass(value[_CLASS])
        result = cls.__new__(cls)
        for name, field_value in value["fields"].items():
            object.__setattr__(result, name, decode(field_value))
        return result
    if _TUPLE in value:
        return tuple(decode(v) for v in value[_TUPLE])
    if _ITEMS in value:
        return {_hashable(decode(k)): decode(v) for k, v in value[_ITEMS]}
    return {k: decode(v) for k, v in value.items()}


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


def _dataclass(name: str) -> type:
    module_name, _, qualname = name.partition(":")
    if module_name != "msprobe" and not module_name.startswith("msprobe."):
        raise ValueError(f"not an msprobe class: {name}")
    found = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise ValueError(f"not a dataclass: {name}")
    return found
