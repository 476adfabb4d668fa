"""`format: tensorboard`: the monitor's metrics written as TensorBoard event files as the model trains, with the
`tensorboard` package's protocol buffers alone (no torch, no TensorFlow: `pip install "mindstudio-probe[tensorboard]"`).

Event files are TFRecord files: each record is its length, the masked CRC-32C of the length, the serialized Event
and its masked CRC-32C. The tensorboard package computes CRC-32C in pure Python (about 0.5 us a byte: 40 ms for a
step of 1,700 metrics), so the records are framed here, with `google-crc32c` (C, in the same extra) when it is
installed and the tensorboard package's function otherwise; each step's records are written in the caller's thread,
with no writer thread.

The layout is the one the reference's CSV-to-TensorBoard converter writes, so that dashboards made for it read ours:
one run per metric group under the rank's folder (`<rank folder>/<group>/events.out.tfevents.*`), scalar tags
`vp<chunk>:<name>:micro<m>/<op>` for groups taken per micro-step (activations and their gradients, the loss) and
`vp<chunk>:<name>/<op>` for the others, the step as the TensorBoard step. Each step's values of a group are one
event (one record written, however many metrics). The anomalies go to a run of their own (`anomalies`), one scalar
per anomaly (`<kind>/<name>`, its value), so that a spike shows on the step where it was found."""

from __future__ import annotations

import math
import os
import socket
import struct
import time

from msprobe.monitor.records import Anomaly, StepRecords
from msprobe.optional import require

ANOMALY_RUN = "anomalies"
MICRO_GROUPS = frozenset({"actv", "actv_grad", "loss"})      # groups taken per micro-step (their tags name it)


def tag(group: str, name: str, vpp_stage: int, micro_step: int, op: str) -> str:
    if group in MICRO_GROUPS:
        return f"vp{vpp_stage}:{name}:micro{micro_step}/{op}"
    return f"vp{vpp_stage}:{name}/{op}"


def _crc32c():
    """The masked CRC-32C of TFRecord framing (google-crc32c's C code when installed)."""
    try:
        import google_crc32c
    except ImportError:
        stub = require("tensorboard.compat.tensorflow_stub.pywrap_tensorflow", "the monitor's format tensorboard")
        return stub.masked_crc32c
    value = google_crc32c.value

    def masked(data: bytes) -> int:
        crc = value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    return masked


class EventFile:
    """One TFRecord file of Events, `events.out.tfevents.<time>.<host>.<pid>.<n>` in its directory (made), starting
    with the file-version event TensorBoard reads first."""

    _count = 0

    def __init__(self, directory: str, event_class, masked_crc) -> None:
        os.makedirs(directory, exist_ok=True)
        EventFile._count += 1
        self.path = os.path.join(directory, f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                                            f"{os.getpid()}.{EventFile._count}")
        self._crc = masked_crc
        self._handle = open(self.path, "wb")  # noqa: SIM115 - kept open while the run lasts
        self.add(event_class(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def add(self, event) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._handle.write(header + struct.pack("<I", self._crc(header)) + data + struct.pack("<I", self._crc(data)))

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


class TensorBoardWriter:
    """One rank's event files under `where`: a directory, or the rank's CSV writer (layout.RunWriter, whose folder
    is made when it first writes: the events go beside the CSVs). `write` each step's records, `write_anomalies` what
    was found, `close` at the end. Files are opened when a group is first written. `config` (the monitor's) is
    accepted for the engine's call and not needed."""

    def __init__(self, where, config=None) -> None:
        self._where = where
        proto = require("tensorboard.compat.proto.event_pb2", "the monitor's format tensorboard")
        summary = require("tensorboard.compat.proto.summary_pb2", "the monitor's format tensorboard")
        self._crc = _crc32c()
        self._event = proto.Event
        self._summary = summary.Summary
        self._writers: dict = {}
        self._tags: dict = {}        # (group, name, vpp, micro) -> tag prefix (built once)

    def _writer(self, run: str):
        writer = self._writers.get(run)
        if writer is None:
            writer = self._writers[run] = EventFile(os.path.join(self.directory, run), self._event, self._crc)
        return writer

    @property
    def directory(self) -> str:
        where = self._where
        if isinstance(where, (str, os.PathLike)):
            return os.fspath(where)
        if where.directory is None:         # the CSV writer makes the rank's folder when it first writes
            return where._folder()
        return where.directory

    def write(self, records: StepRecords, wall_time: float | None = None) -> None:
        """One event per group of the step, holding every present row's statistics."""
        when = time.time() if wall_time is None else wall_time
        events: dict = {}          # group -> its event of this step
        adders: dict = {}
        ops = records.ops
        rows = records.values.tolist()
        present = records.present.tolist() if len(records.present) == len(records) else [True] * len(records)
        for row, (group, name, vpp, micro) in enumerate(zip(records.group, records.name, records.vpp_stage,
                                                            records.micro_step)):
            if not present[row]:
                continue
            key = (group, name, vpp, micro)
            prefix = self._tags.get(key)
            if prefix is None:
                prefix = self._tags[key] = tag(group, name, vpp, micro, "")
            add = adders.get(group)
            if add is None:       # (a message's fields are looked up once: each lookup costs as much as an add)
                event = events[group] = self._event(wall_time=when, step=records.step)
                add = adders[group] = event.summary.value.add
            for op, value in zip(ops, rows[row]):
                add(tag=prefix + op, simple_value=value)
        for group, event in events.items():
            writer = self._writer(group)
            writer.add(event)
            writer.flush()

    def write_anomalies(self, anomalies: list, wall_time: float | None = None) -> None:
        when = time.time() if wall_time is None else wall_time
        for anomaly in anomalies:
            value = anomaly.value if isinstance(anomaly.value, float) and not math.isnan(anomaly.value) else 0.0
            summary = self._summary(value=[self._summary.Value(tag=_anomaly_tag(anomaly), simple_value=value)])
            self._writer(ANOMALY_RUN).add(self._event(wall_time=when, step=anomaly.step, summary=summary))
        if anomalies:
            self._writer(ANOMALY_RUN).flush()

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def _anomaly_tag(anomaly: Anomaly) -> str:
    return f"{anomaly.kind}/{anomaly.group}/{anomaly.name}/{anomaly.op}"
