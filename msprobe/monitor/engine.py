"""The monitor's live engine, the same for every framework: which steps are recorded (start_step, step_interval,
collect_times, the dynamic on/off of the config file), one step's rows as they are taken, the end of a step (one
transfer of the step's statistics to the host, the CSV/TensorBoard writers, the anomaly rules and the golden watch,
`action: stop`), and the rule that nothing raises into training: a failing part is switched off with one warning.

A framework adapter (msprobe.pytorch.monitor.TrainerMon, the MindSpore one) takes the statistics on the device and
hands them over as opaque handles; it provides:
    to_host(handles, numels) -> float64 ndarray [rows, len(ops)]: every handle's statistics in one transfer
    apply(config or None): install the hooks the config asks for (None: remove them all)
    any_rank(flag) -> bool: whether any rank of the job raised the flag (for `action: stop`; a collective)
    structure() -> dict: the model's module structure (print_struct)
"""

from __future__ import annotations

import json
import os

import numpy as np

from msprobe.collect.guard import one_line
from msprobe.io import atomic_path
from msprobe.log import get_logger
from msprobe.monitor.config import MonitorConfig, MonitorConfigError, load_config
from msprobe.monitor.layout import RunWriter, has_micro_step, output_root, stage_of
from msprobe.monitor.records import StepRecords

DYNAMIC_ENV = "DYNAMIC_MONITOR"


def check_format(config: MonitorConfig) -> None:
    """`format: tensorboard` needs the tensorboard package: its absence is a config error before training."""
    if config.format == "tensorboard":
        from msprobe.errors import MsprobeError
        from msprobe.optional import require

        try:
            require("tensorboard.compat.proto.event_pb2", "the monitor's format tensorboard")
        except MsprobeError as exc:
            raise MonitorConfigError(str(exc)) from None


def check_output(config: MonitorConfig, root: str | None = None) -> str:
    """The output root (MONITOR_OUTPUT_DIR), made if missing; one MonitorConfigError line when it cannot be written
    (format api writes nothing: not checked)."""
    root = root or output_root()
    if config.format == "api":
        return root
    try:
        os.makedirs(root, exist_ok=True)
    except (OSError, ValueError) as exc:
        raise MonitorConfigError(f"MONITOR_OUTPUT_DIR {root} cannot be made: {getattr(exc, 'strerror', None) or exc}") \
            from None
    if not os.path.isdir(root) or not os.access(root, os.W_OK | os.X_OK):
        raise MonitorConfigError(f"MONITOR_OUTPUT_DIR {root} is not a writable directory")
    return root


class MonitorStop(SystemExit):
    """Raised out of the optimizer's step() at the step boundary where the monitor ends training (`action: stop`
    after an anomaly, or `print_struct`), once every file is written. A SystemExit: an uncaught one ends the
    script with its message and exit status 1, and a loop's `except Exception` does not swallow it."""


def dynamic_mode() -> bool:
    """DYNAMIC_MONITOR=True (any case, or 1) switches the reference's dynamic on/off mode on."""
    return os.environ.get(DYNAMIC_ENV, "").strip().lower() in ("true", "1", "yes", "on")


class StepBuffer:
    """One step's rows as they are taken: metadata in parallel lists, the statistics as the adapter's handles (None
    for a slot without a tensor). `key`ed rows can be replaced (a gradient taken again in a later micro-step)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.group: list = []
        self.name: list = []
        self.module: list = []
        self.micro_step: list = []
        self.vpp_stage: list = []
        self.shape: list = []
        self.dtype: list = []
        self.numel: list = []
        self.handle: list = []
        self._keyed: dict = {}

    def __len__(self) -> int:
        return len(self.name)

    def add(self, group: str, name: str, module: str, micro_step: int, vpp_stage: int, handle=None,
            shape=None, dtype=None, numel: int = 0, key=None) -> int:
        """Add a row (or replace the row of `key`); its index, where a late handle can be put."""
        if key is not None:
            at = self._keyed.get(key)
            if at is not None:
                self.handle[at], self.shape[at], self.dtype[at], self.numel[at] = handle, shape, dtype, numel
                self.micro_step[at] = micro_step
                return at
            self._keyed[key] = len(self.name)
        self.group.append(group)
        self.name.append(name)
        self.module.append(module)
        self.micro_step.append(micro_step)
        self.vpp_stage.append(vpp_stage)
        self.shape.append(shape)
        self.dtype.append(dtype)
        self.numel.append(numel)
        self.handle.append(handle)
        return len(self.name) - 1

    def records(self, rank: int, step: int, ops: tuple, to_host) -> StepRecords:
        present = np.array([h is not None for h in self.handle], dtype=bool)
        values = np.full((len(self.name), len(ops)), np.nan)
        if present.any():
            values[present] = to_host([h for h in self.handle if h is not None],
                                      [n for n, h in zip(self.numel, self.handle) if h is not None])
        # a group written without a micro_step column (gradients, optimizer) reads back as micro-step 0: so it is
        micro = [m if has_micro_step(g) else 0 for g, m in zip(self.group, self.micro_step)]
        return StepRecords(rank=rank, step=step, ops=ops, group=self.group, name=self.name, module=self.module,
                           stage=[stage_of(g) for g in self.group], micro_step=micro,
                           call=list(range(len(self.name))), vpp_stage=self.vpp_stage, shape=self.shape,
                           dtype=self.dtype, values=values, present=present)


class MonitorEngine:
    """The live monitor of one rank. The adapter calls begin_micro_step(), adds rows to `buffer` while
    `collecting`, and end_step() at every step boundary (after the optimizer's step); end_step() returns the message
    of a stop (the adapter raises MonitorStop with it) or None."""

    def __init__(self, config: MonitorConfig, rank: int, adapter, config_path: str | None = None,
                 start_iteration: int = 0, root: str | None = None, dynamic: bool | None = None,
                 detector_factory=None, watch_factory=None):
        self.config = config
        self.rank = rank
        self.adapter = adapter
        self.config_path = config_path
        self.root = root or output_root()
        self.dynamic = dynamic_mode() if dynamic is None else dynamic
        self.step = start_iteration
        self.micro_step = -1            # begin_micro_step() makes the first forward micro-step 0
        self.buffer = StepBuffer()
        self.collecting = False
        self.closed = False
        self.last_records: StepRecords | None = None     # format "api": the last step's metrics, for the getters
        self._detector_factory = detector_factory
        self._watch_factory = watch_factory
        self._writer: RunWriter | None = None
        self._extra_writers: list = []
        self._detector = None
        self._watch = None
        self._failed: set = set()
        self._warned: set = set()
        self._collected = 0
        self._first_step = self.step           # where step_interval and collect_times count from
        self._active = not self.dynamic or config.dynamic_on
        self._mtime = self._config_mtime()
        self._stop_message: str | None = None
        self._anomalies = 0
        self._log_warnings(config)
        if self.dynamic and self._active:       # the reference: dynamic collection starts at the next step
            self._first_step = self.step + 1

    def start(self) -> None:
        """Install the hooks of the config and decide whether the first step is recorded (the adapter calls it
        once it is wired to the engine). A format whose package is missing is a MonitorConfigError here."""
        check_format(self.config)
        self._set_up(self.config)

    # ------------------------------------------------------------------ failures
    def ok(self, part: str) -> bool:
        return part not in self._failed

    def fail(self, part: str, exc: BaseException, consequence: str = "it is switched off, training goes on") -> None:
        """A part of the monitor failed: switched off, one warning (per part), training is never touched."""
        if part in self._failed:
            return
        self._failed.add(part)
        get_logger().warning("msprobe monitor: %s failed at step %d (%s); %s", part, self.step, one_line(exc),
                             consequence)

    def warn_once(self, key, message: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            get_logger().warning("msprobe monitor: " + message, *args)

    # ------------------------------------------------------------------ configuration
    def _log_warnings(self, config: MonitorConfig) -> None:
        for line in config.warnings:
            self.warn_once(("config", line), "%s", line)

    def _set_up(self, config: MonitorConfig) -> None:
        self.config = config
        if self._writer is not None:            # the CSV columns of the files to come
            self._writer.ops, self._writer.ndigits = config.ops, config.ndigits
        self._detector = self._watch = None
        self._failed -= {"anomaly rules", "golden watch"}
        try:
            if config.alert.rules:
                self._detector = self._make_detector(config)
            if config.golden:
                self._watch = self._make_watch(config)
        except Exception as exc:  # noqa: BLE001 - a golden run that cannot be read must not stop training
            self.fail("the anomaly rules or the golden watch", exc, "no anomaly is reported")
        self.collecting = self._wants(self.step)
        self._apply(config if self._active and self._will_collect() else None)

    def _make_detector(self, config: MonitorConfig):
        if self._detector_factory is not None:
            return self._detector_factory(config, self.rank)
        from msprobe.monitor.anomaly import AnomalyDetector

        return AnomalyDetector(config.alert)

    def _make_watch(self, config: MonitorConfig):
        if self._watch_factory is not None:
            return self._watch_factory(config, self.rank)
        from msprobe.monitor.golden import GoldenWatch

        return GoldenWatch(config, self.rank)

    def _apply(self, config) -> None:
        try:
            self.adapter.apply(config)
        except Exception as exc:  # noqa: BLE001
            self.fail("installing the hooks", exc, "the monitor records nothing")
            self._active = False
            self.collecting = False

    def _config_mtime(self):
        if not (self.dynamic and self.config_path):
            return None
        try:
            return os.stat(self.config_path).st_mtime_ns
        except OSError:
            return None

    def _poll_config(self) -> None:
        """Dynamic mode: a config file saved since the last look is read at this step boundary; with dynamic_on it
        (re)starts collection at the next step with collect_times counted afresh, without it stops collection. A
        file that cannot be used is one warning and changes nothing."""
        mtime = self._config_mtime()
        if mtime is None or mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            config = load_config(self.config_path)
            check_format(config)
        except MonitorConfigError as exc:
            get_logger().warning("msprobe monitor: the changed config is not used (%s); the monitor goes on as "
                                 "before", exc)
            return
        self._log_warnings(config)
        self._active = config.dynamic_on
        self._collected = 0
        self._first_step = self.step          # end_step() has moved on to the next step already
        get_logger().info("msprobe monitor: config changed: monitoring %s from step %d", "on" if self._active else
                          "off", self.step)
        self._set_up(config)

    # ------------------------------------------------------------------ schedule
    def _wants(self, step: int) -> bool:
        config = self.config
        if not self._active or self.closed or self._stop_message:
            return False
        start = self._first_step if self.dynamic else config.start_step
        if step < start or (step - start) % config.step_interval:
            return False
        return self._collected < config.collect_times

    def _will_collect(self) -> bool:
        """Whether any later step can still be recorded (else the hooks come off)."""
        return self._active and self._collected < self.config.collect_times

    def begin_micro_step(self) -> None:
        """A forward of the model starts (the first one of a step is micro-step 0)."""
        self.micro_step += 1

    # ------------------------------------------------------------------ the end of a step
    def end_step(self) -> str | None:
        """Finish this step: write it and look for anomalies if it was recorded, advance to the next step, read a
        changed config (dynamic mode). Returns the stop message when training must end here."""
        if self.collecting:
            self._finish()
            self._collected += 1
        self.buffer.clear()
        self.micro_step = -1
        self.step += 1
        if self.dynamic:
            self._poll_config()
        if self._stop_message is None and self.config.print_struct and self._collected:
            self._stop_message = self._print_struct()
        if self._stop_message:
            self.close()
            return self._stop_message
        self.collecting = self._wants(self.step)
        if not self.collecting and not self._will_collect() and self._active:
            self._active = False
            self._apply(None)          # nothing left to record: no hook stays on
        return None

    def _finish(self) -> None:
        if not len(self.buffer):
            return
        config = self.config
        try:
            records = self.buffer.records(self.rank, self.step, config.record_ops, self.adapter.to_host)
        except Exception as exc:  # noqa: BLE001
            self.fail("taking the statistics", exc, "this step is not recorded")
            return
        self.last_records = records
        if config.format != "api" and self.ok("writing"):
            try:
                self._writers()
                self._writer.write(records)
                for writer in self._extra_writers:
                    writer.write(records)
            except Exception as exc:  # noqa: BLE001 - a full disk must not stop training
                self.fail("writing", exc, "nothing more is written, training goes on")
        anomalies = []
        for part, finder in (("anomaly rules", self._detector), ("golden watch", self._watch)):
            if finder is None or not self.ok(part):
                continue
            try:
                found = finder.observe(records) if part == "anomaly rules" else finder.check(records)
                anomalies.extend(found or ())
            except Exception as exc:  # noqa: BLE001
                self.fail(part, exc)
        if anomalies:
            self._report(records.step, anomalies)
        if config.action == "stop" and (self._detector or self._watch):
            stop = bool(anomalies)
            try:
                stop = self.adapter.any_rank(stop)
            except Exception as exc:  # noqa: BLE001 - without agreement this rank decides alone
                self.fail("agreeing on the stop with the other ranks", exc, "each rank decides alone")
            if stop:
                report = self._stop_report() if self.rank == 0 else None
                self._stop_message = self._stop_text(records.step, anomalies, report)

    def _writers(self) -> None:
        if self._writer is not None:
            return
        config = self.config
        self._writer = RunWriter(self.root, self.rank, config.ops, config.ndigits, config.step_count_per_record,
                                 reference_anomalies=config.alert.dump)
        if config.format == "tensorboard":
            from msprobe.monitor.tensorboard import TensorBoardWriter

            self._extra_writers.append(TensorBoardWriter(self._writer, config))

    def _report(self, step: int, anomalies: list) -> None:
        self._anomalies += len(anomalies)
        anomalies = sorted(anomalies, key=lambda a: a.order_key())
        if self.ok("writing anomalies"):
            try:
                self._writers()
                for writer in [self._writer, *self._extra_writers]:
                    if hasattr(writer, "write_anomalies"):
                        writer.write_anomalies(anomalies)
            except Exception as exc:  # noqa: BLE001
                self.fail("writing anomalies", exc)
        first = anomalies[0]
        more = f" ({len(anomalies)} anomalies in this step)" if len(anomalies) > 1 else ""
        get_logger().warning("msprobe monitor: rank %d step %d: %s in %s (%s, %s, micro-step %d)%s%s", self.rank,
                             step, first.kind, first.module or first.name, first.metric, first.stage,
                             first.micro_step, f": {first.message}" if first.message else "", more)

    def _stop_report(self) -> str | None:
        """`action: stop`: the analysis of every rank's anomalies so far (each rank wrote its own before the ranks
        agreed to stop) and the dump config of the first, as `msprobe monitor analyse` writes them, under
        anomaly_detected/. The path of the dump config, or None."""
        from msprobe.monitor.analyse import analyse, dump_config, to_json
        from msprobe.monitor.layout import ANOMALY_DIR, read_anomalies

        try:
            for writer in [self._writer, *self._extra_writers]:
                if writer is not None and hasattr(writer, "flush"):
                    writer.flush()
            analysis = analyse(read_anomalies(self.root), "the monitor's anomaly files",
                               framework=getattr(self.adapter, "framework", "pytorch"))
            if analysis.first is None:
                return None
            folder = os.path.join(self.root, ANOMALY_DIR)
            config_path = os.path.join(folder, "dump_config.json")
            for path, content in ((config_path, dump_config(analysis.first, analysis.framework)),
                                  (os.path.join(folder, "analyse.json"), to_json(analysis, config_path))):
                with atomic_path(path) as temporary:
                    with open(temporary, "w", encoding="utf-8") as handle:
                        json.dump(content, handle, indent=2, allow_nan=True)
            return config_path
        except Exception as exc:  # noqa: BLE001 - the stop goes on without its report
            self.fail("writing the stop's analysis", exc, "msprobe monitor analyse writes it")
            return None

    def _stop_text(self, step: int, anomalies: list, report: str | None = None) -> str:
        if anomalies:
            first = min(anomalies, key=lambda a: a.order_key())
            what = f"{first.kind} in {first.module or first.name} ({first.metric}) at step {step}"
        else:
            what = f"another rank found an anomaly at step {step}"
        where = os.path.join(self.root, "anomaly_detected")
        if report:
            return (f"msprobe monitor: training stopped after step {step} (action: stop): {what}; the analysis and "
                    f"the dump config of the first anomaly in {where}; next: PrecisionDebugger(config_path="
                    f"{report!r}) on this step, or msprobe monitor analyse -d {self.root}")
        return (f"msprobe monitor: training stopped after step {step} (action: stop): {what}; anomalies in "
                f"{where}; next: msprobe monitor analyse -d {self.root}")

    def _print_struct(self) -> str:
        path = os.path.join(self.root, "module_struct", f"rank{self.rank}", "module_struct.json")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_path(path) as temporary:
                with open(temporary, "w", encoding="utf-8") as handle:
                    json.dump(self.adapter.structure(), handle, indent=2)
        except Exception as exc:  # noqa: BLE001
            self.fail("print_struct", exc)
            return f"msprobe monitor: print_struct could not write {path}; training stopped after the first step"
        return f"msprobe monitor: the module structure is in {path} (print_struct); training stopped after the " \
               "first step"

    # ------------------------------------------------------------------ end of the run
    def close(self) -> None:
        """Write what the step under way recorded (a run that ends or fails mid-step keeps its last rows), close the
        files. Never raises."""
        if self.closed:
            return
        if self.collecting and len(self.buffer):
            self._finish()
            self.buffer.clear()
        self.closed = True
        self.collecting = False
        for writer in [self._writer, *self._extra_writers]:
            if writer is None:
                continue
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001
                self.fail("closing the files", exc)
        for finder in (self._detector, self._watch):
            try:
                getattr(finder, "close", lambda: None)()
            except Exception as exc:  # noqa: BLE001
                self.fail("closing the anomaly rules", exc)
        if self._anomalies:
            get_logger().info("msprobe monitor: %d anomalies recorded on rank %d; msprobe monitor analyse -d %s",
                              self._anomalies, self.rank, self.root)
        try:
            self.adapter.apply(None)
        except Exception:  # noqa: BLE001 - the interpreter may be shutting down
            pass

    @property
    def directory(self) -> str | None:
        return self._writer.directory if self._writer is not None else None

