"""The monitor's files: the reference's output layout (a folder per rank, `<MONITOR_OUTPUT_DIR>/<time>-rank<r>-<hash>/`,
one CSV per metric group and window of steps, `<group>_<first step>-<last step>.csv`, with the reference's columns),
written append-only, read back as StepRecords one step at a time, and the anomaly files.

CSV columns: `vpp_stage, name, step, [micro_step,] <ops in the config's order>, shape, dtype, module, call`. The
reference's columns come first and keep their meaning (its readers, such as its CSV-to-TensorBoard converter, read the
file by column name); `module` and `call` (the row's order within the step) are ours. A slot without a tensor (an
input that needs no gradient) has empty statistics, shape and dtype cells: absent, not NaN. Files are only ever
appended to, one step's rows in one write: a crash leaves at most a last line cut short, which the reader skips.

Anomalies: `<MONITOR_OUTPUT_DIR>/anomaly_detected/rank<r>/anomaly.jsonl`, one JSON object per line (the Anomaly
fields), appended as they are found; with `alert.dump` the reference's `anomaly.json` (one object, keyed by
"<tag>_step_<s>_call_<c>") is also written once when the monitor closes."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import fields

import numpy as np

from msprobe.errors import PathError
from msprobe.io import atomic_path
from msprobe.monitor.records import OPS, STAGES, Anomaly, StepRecords

# group -> (stage, whether its rows carry a micro_step). The stage of a row is its group's.
GROUPS = {
    "param_origin": ("forward", False),     # the weights a step starts with (taken before its first forward)
    "actv": ("forward", True),
    "loss": ("forward", True),
    "actv_grad": ("backward", True),
    "grad_unreduced": ("backward", False),
    "grad_reduced": ("optimizer", False),
    "grad_norm": ("optimizer", False),
    "exp_avg": ("optimizer", False),
    "exp_avg_sq": ("optimizer", False),
    "update_ratio": ("optimizer", False),
    "param_updated": ("optimizer", False),
}
COUNT_OPS = ("nans", "infs")            # written as integers
ANOMALY_DIR = "anomaly_detected"
ANOMALY_FILE = "anomaly.jsonl"
REFERENCE_ANOMALY_FILE = "anomaly.json"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_FOLDER = re.compile(r"^(?P<month>[A-Z][a-z]{2})(?P<day>\d{2})_(?P<hour>\d{2})-(?P<minute>\d{2})-(?P<second>\d{2})"
                     r"-rank(?P<rank>\d+)-(?P<hash>[0-9a-f]+)$")
_FILE = re.compile(r"^(?P<group>[A-Za-z0-9_]+?)_(?P<first>\d+)-(?P<last>\d+)\.csv$")


def output_root() -> str:
    """MONITOR_OUTPUT_DIR, or ./monitor_output as with the reference."""
    return os.path.abspath(os.environ.get("MONITOR_OUTPUT_DIR") or "monitor_output")


def folder_name(rank: int, when: float | None = None) -> str:
    """`Dec07_07-38-27-rank0-dc2fa436`: local time (English month names whatever the locale), rank, 8 random hex."""
    t = time.localtime(when)
    return (f"{_MONTHS[t.tm_mon - 1]}{t.tm_mday:02d}_{t.tm_hour:02d}-{t.tm_min:02d}-{t.tm_sec:02d}"
            f"-rank{rank}-{secrets.token_hex(4)}")


def window(step: int, count: int) -> tuple:
    """The file's step range holding `step` when each file holds `count` steps (windows of step numbers)."""
    first = step // count * count
    return first, first + count - 1


def has_micro_step(group: str) -> bool:
    return GROUPS.get(group, ("", False))[1]


def stage_of(group: str) -> str:
    return GROUPS.get(group, ("step", False))[0]


class RunWriter:
    """One rank's files of one run: the CSVs of every step it records and its anomalies. The rank's folder is made
    when the first step is written. Never raises from write(): the monitor's caller guards it."""

    def __init__(self, root: str, rank: int, ops: tuple, ndigits: int = 6, step_count_per_record: int = 1,
                 reference_anomalies: bool = False):
        self.root = root
        self.rank = rank
        self.ops = tuple(ops)                # CSV columns, the config's order
        self.ndigits = ndigits
        self.count = step_count_per_record
        self.reference_anomalies = reference_anomalies
        self.directory: str | None = None
        self._open: dict = {}                # group -> (window, file object, its ops columns)
        self._cells: dict = {}               # text -> its CSV cell
        self._anomalies = None

    def _folder(self) -> str:
        if self.directory is None:
            os.makedirs(self.root, exist_ok=True)
            for _ in range(100):
                path = os.path.join(self.root, folder_name(self.rank))
                try:
                    os.mkdir(path, 0o750)
                except FileExistsError:
                    continue
                self.directory = path
                break
            else:
                raise FileExistsError(f"cannot make a new run folder in {self.root}")
        return self.directory

    def header(self, group: str) -> list:
        head = ["vpp_stage", "name", "step"] + (["micro_step"] if has_micro_step(group) else [])
        return head + list(self.ops) + ["shape", "dtype", "module", "call"]

    def write(self, records: StepRecords) -> None:
        """Append one step's rows, group by group (each group's rows in one write)."""
        if not len(records):
            return
        folder = self._folder()
        by_group: dict = {}
        for row, group in enumerate(records.group):
            by_group.setdefault(group, []).append(row)
        values = records.values
        text_of = self._text
        ndigits = self.ndigits
        step = str(records.step)
        for group, rows in by_group.items():
            micro = has_micro_step(group)
            head = io.StringIO()
            handle, ops = self._file(folder, group, window(records.step, self.count), csv.writer(head,
                                                                                                 lineterminator="\n"))
            columns = [records.ops.index(op) if op in records.ops else None for op in ops]
            counts = [op in COUNT_OPS for op in ops]
            empty = "," * (len(ops) + 2)
            lines = [head.getvalue()]
            for row in rows:
                start = f"{records.vpp_stage[row]},{text_of(records.name[row])},{step}"
                if micro:
                    start += f",{records.micro_step[row]}"
                if records.present[row]:
                    cells = []
                    for column, count in zip(columns, counts):
                        value = math.nan if column is None else float(values[row, column])
                        cells.append(str(int(value)) if count and math.isfinite(value) else
                                     repr(round(value, ndigits)))
                    shape = records.shape[row]
                    middle = f",{','.join(cells)},{self._shape(shape)},{text_of(records.dtype[row] or '')}"
                else:
                    middle = empty
                lines.append(f"{start}{middle},{text_of(records.module[row])},{records.call[row]}\n")
            handle.write("".join(lines))
            handle.flush()

    def _text(self, text: str) -> str:
        """A text cell as csv writes it (quoted when it holds a comma, a quote or a line break), cached."""
        cell = self._cells.get(text)
        if cell is None:
            if len(self._cells) > 100_000:
                self._cells = {}
            cell = '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text
            self._cells[text] = cell
        return cell

    def _shape(self, shape) -> str:
        return "" if shape is None else self._text(str(list(shape)))

    def _file(self, folder: str, group: str, span: tuple, out) -> tuple:
        """The group's file of this window (opened, its header written by `out`) and its ops columns."""
        current = self._open.get(group)
        if current is not None and current[0] == span:
            return current[1], current[2]
        if current is not None:
            current[1].close()
        path = os.path.join(folder, f"{group}_{span[0]}-{span[1]}.csv")
        fresh = not os.path.exists(path)
        handle = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - kept open for the window
        if fresh:
            out.writerow(self.header(group))
        self._open[group] = (span, handle, self.ops)
        return handle, self.ops

    def write_anomalies(self, anomalies: list) -> None:
        """Append anomalies to anomaly_detected/rank<r>/anomaly.jsonl, one JSON object per line."""
        if not anomalies:
            return
        if self._anomalies is None:
            folder = os.path.join(self.root, ANOMALY_DIR, f"rank{self.rank}")
            os.makedirs(folder, exist_ok=True)
            self._anomalies = open(os.path.join(folder, ANOMALY_FILE), "a", encoding="utf-8")  # noqa: SIM115
        self._anomalies.write("".join(json.dumps(anomaly_record(a), allow_nan=True) + "\n" for a in anomalies))
        self._anomalies.flush()

    def close(self) -> None:
        for _, handle, _ in self._open.values():
            handle.close()
        self._open = {}
        if self._anomalies is not None:
            self._anomalies.close()
            self._anomalies = None
            if self.reference_anomalies:
                write_reference_anomalies(os.path.join(self.root, ANOMALY_DIR, f"rank{self.rank}"))


# ---------------------------------------------------------------------------------------------------- anomalies
def anomaly_record(anomaly: Anomaly) -> dict:
    return {f.name: getattr(anomaly, f.name) for f in fields(Anomaly)}


def _anomaly(record: dict) -> Anomaly | None:
    try:
        return Anomaly(**{f.name: record[f.name] for f in fields(Anomaly) if f.name in record})
    except TypeError:
        return None


def _anomaly_files(directory: str) -> list:
    """rank -> anomaly.jsonl under a MONITOR_OUTPUT_DIR, its anomaly_detected folder, or one rank folder of it."""
    directory = os.path.abspath(directory)
    base = os.path.basename(directory)
    if base.startswith("rank") and base[4:].isdigit():
        candidates = [(int(base[4:]), directory)]
    else:
        if os.path.isdir(os.path.join(directory, ANOMALY_DIR)):
            directory = os.path.join(directory, ANOMALY_DIR)
        candidates = []
        for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
            if name.startswith("rank") and name[4:].isdigit():
                candidates.append((int(name[4:]), os.path.join(directory, name)))
    return [(rank, os.path.join(path, ANOMALY_FILE)) for rank, path in sorted(candidates)
            if os.path.isfile(os.path.join(path, ANOMALY_FILE))]


def read_anomalies(directory: str) -> list:
    """Every rank's anomalies (anomaly.jsonl) under `directory`, in the order `analyse` uses (Anomaly.order_key).
    A line cut short by a crash is skipped."""
    found = []
    for _, path in _anomaly_files(directory):
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                anomaly = _anomaly(record) if isinstance(record, dict) else None
                if anomaly is not None:
                    found.append(anomaly)
    found.sort(key=Anomaly.order_key)
    return found


def reference_tag(anomaly: Anomaly, vpp_stage: int = 0) -> str:
    if has_micro_step(anomaly.group):
        return f"{vpp_stage}:{anomaly.name}:{anomaly.micro_step}/rank{anomaly.rank}/{anomaly.group}"
    return f"{vpp_stage}:{anomaly.name}/rank{anomaly.rank}/{anomaly.group}"


def write_reference_anomalies(rank_folder: str) -> None:
    """The reference's anomaly.json (one object) from this rank's anomaly.jsonl, written once (atomically)."""
    path = os.path.join(rank_folder, ANOMALY_FILE)
    if not os.path.isfile(path):
        return
    entries: dict = {}
    for anomaly in read_anomalies(rank_folder):
        tag = reference_tag(anomaly)
        entries[f"{tag}_step_{anomaly.step}_call_{anomaly.call}"] = {
            "rank": anomaly.rank, "step": anomaly.step, "micro_step": anomaly.micro_step, "pp_stage": 0,
            "vpp_stage": 0, "call_id": anomaly.call, "tag_name": tag,
            "message": anomaly.message or f"Rule {anomaly.rule} reports anomaly signal in ('{tag}', "
                                          f"'{anomaly.op}') at step {anomaly.step}.",
            "group_mates": [anomaly.rank]}
    with atomic_path(os.path.join(rank_folder, REFERENCE_ANOMALY_FILE)) as temporary:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(entries, handle, indent=1, allow_nan=True)


# ---------------------------------------------------------------------------------------------------- reading
def _folder_key(name: str) -> tuple:
    match = _FOLDER.match(name)
    if not match:
        return (99, name)
    month = _MONTHS.index(match["month"]) if match["month"] in _MONTHS else 12
    return (month, int(match["day"]), int(match["hour"]), int(match["minute"]), int(match["second"]), name)


def run_folders(directory: str) -> dict:
    """rank -> its folders (oldest first) under a MONITOR_OUTPUT_DIR, or {rank: [directory]} for one rank folder.
    A rank with several folders (a resumed run) is read as one run: a step in a later folder replaces it."""
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise PathError(f"{directory} is not a directory (give a MONITOR_OUTPUT_DIR or one rank's folder of it)")
    match = _FOLDER.match(os.path.basename(directory))
    if match:
        return {int(match["rank"]): [directory]}
    folders: dict = {}
    for name in os.listdir(directory):
        found = _FOLDER.match(name)
        if found and os.path.isdir(os.path.join(directory, name)):
            folders.setdefault(int(found["rank"]), []).append(name)
    return {rank: [os.path.join(directory, n) for n in sorted(names, key=_folder_key)]
            for rank, names in sorted(folders.items())}


def read_run(directory: str) -> dict:
    """rank -> an iterator of its StepRecords in step order, reading one window of files at a time (never the whole
    run in memory). `directory` is a MONITOR_OUTPUT_DIR or one rank's folder; files the reference wrote are read
    too (their rows get their module from the name and their order from the file)."""
    return {rank: _rank_steps(rank, folders) for rank, folders in run_folders(directory).items()}


def _rank_steps(rank: int, folders: list) -> Iterator[StepRecords]:
    files = []
    for order, folder in enumerate(folders):
        for name in os.listdir(folder):
            match = _FILE.match(name)
            if match:
                files.append((int(match["first"]), int(match["last"]), order, match["group"],
                              os.path.join(folder, name)))
    files.sort()
    at = 0
    while at < len(files):      # a batch: files whose step ranges overlap (normally one window of every group)
        last = files[at][1]
        end = at + 1
        while end < len(files) and files[end][0] <= last:
            last = max(last, files[end][1])
            end += 1
        yield from _batch_steps(rank, files[at:end])
        at = end


def _batch_steps(rank: int, batch: list) -> Iterator[StepRecords]:
    rows_by_step: dict = {}          # step -> folder order -> list of row dicts
    for _, _, order, group, path in batch:
        for row in _read_csv(path, group):
            rows_by_step.setdefault(row["step"], {}).setdefault(order, []).append(row)
    for step in sorted(rows_by_step):
        orders = rows_by_step.pop(step)
        yield _records(rank, step, orders[max(orders)])


def _read_csv(path: str, group: str) -> Iterator[dict]:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        text = handle.read()
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]          # a last line cut short by a crash
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header or "name" not in header or "step" not in header:
        return
    index = {column: i for i, column in enumerate(header)}
    ops = [op for op in OPS if op in index]
    micro = index.get("micro_step")
    for position, line in enumerate(reader):
        if len(line) != len(header):
            continue
        try:
            step = int(line[index["step"]])
            micro_step = int(line[micro]) if micro is not None and line[micro] not in ("", "nan") else 0
            vpp = int(line[index["vpp_stage"]]) if "vpp_stage" in index and line[index["vpp_stage"]] else 0
            call = int(line[index["call"]]) if "call" in index and line[index["call"]] else None
        except ValueError:
            continue
        shape_text = line[index["shape"]] if "shape" in index else ""
        present = shape_text not in ("", "nan")
        name = line[index["name"]]
        module = line[index["module"]] if "module" in index else _module_of(name)
        yield {"group": group, "name": name, "module": module, "step": step, "micro_step": micro_step,
               "vpp_stage": vpp, "call": call, "position": position, "present": present,
               "shape": _shape(shape_text) if present else None,
               "dtype": (line[index["dtype"]] or None) if present and "dtype" in index else None,
               "values": {op: _float(line[index[op]]) for op in ops}}


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _shape(text: str):
    try:
        return tuple(int(part) for part in text.strip("[]() ").split(",") if part.strip())
    except ValueError:
        return None


def _module_of(name: str) -> str:
    """The module a row of a reference-written file is about: actv names end with .input/.output[_i], parameter
    names with the parameter's own name."""
    return name.rpartition(".")[0]


def _records(rank: int, step: int, rows: list) -> StepRecords:
    stage_order = {stage: i for i, stage in enumerate(STAGES)}
    group_order = {group: i for i, group in enumerate(GROUPS)}
    if all(row["call"] is not None for row in rows):
        rows.sort(key=lambda row: row["call"])
    else:       # reference files: forward, backward, optimizer; within a stage, by group then file order
        rows.sort(key=lambda row: (row["micro_step"] if has_micro_step(row["group"]) else 0,
                                   stage_order.get(stage_of(row["group"]), len(STAGES)),
                                   group_order.get(row["group"], len(GROUPS)), row["position"]))
    ops = tuple(op for op in OPS if any(op in row["values"] for row in rows))
    values = np.full((len(rows), len(ops)), np.nan)
    for i, row in enumerate(rows):
        for j, op in enumerate(ops):
            if op in row["values"]:
                values[i, j] = row["values"][op]
    return StepRecords(
        rank=rank, step=step, ops=ops, group=[r["group"] for r in rows], name=[r["name"] for r in rows],
        module=[r["module"] for r in rows], stage=[stage_of(r["group"]) for r in rows],
        micro_step=[r["micro_step"] for r in rows],
        call=[r["call"] if r["call"] is not None else i for i, r in enumerate(rows)],
        vpp_stage=[r["vpp_stage"] for r in rows], shape=[r["shape"] for r in rows], dtype=[r["dtype"] for r in rows],
        values=values, present=np.array([r["present"] for r in rows], dtype=bool))
