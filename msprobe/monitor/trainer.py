"""The part of `TrainerMon` that is the same for every framework: the reference's constructor and methods
(set_monitor's checks, record_loss, reload_xy, ops, generate_xy_metrics / generate_wgrad_metrics, close), one line
instead of a traceback for a bad config, and the monitors closed at exit. A framework's TrainerMon
(msprobe.pytorch.monitor, msprobe.mindspore.monitor) subclasses it and supplies its hooks object, which is the
engine's adapter (msprobe.monitor.engine) and provides, besides:

    engine                  the MonitorEngine, set by set_monitor()
    attach() / detach()     put on / take off every hook
    record_loss(loss)       the loss a script names (monitor.record_loss): then only that call records it
    settle()                complete the rows of the step under way whose statistics are still pending

HooksBase holds what those hooks objects do the same way: the explicit loss and the end of a step.
"""

from __future__ import annotations

import atexit
import functools
import sys
import weakref
from dataclasses import replace

from msprobe.collect.debugger import not_recording
from msprobe.log import get_logger
from msprobe.monitor.config import MonitorConfigError, load_config
from msprobe.monitor.engine import MonitorEngine, MonitorStop, check_format, check_output
from msprobe.monitor.layout import has_micro_step


class TrainerMonBase:
    """The training monitor. A bad config raises MonitorConfigError here, before training (one line: uncaught, it
    ends the script with that line and no traceback); afterwards nothing the monitor does raises into training, but
    the MonitorStop of `action: stop` or `print_struct` at a step boundary."""

    framework = ""
    model_kind = "a model"              # what set_monitor(model) takes, for its error line

    def __init__(self, config_file_path, process_group=None, params_have_main_grad=True, opt_ty=None):
        try:
            config = load_config(config_file_path)
            check_format(config)
            check_output(config)
        except MonitorConfigError:
            one_line_on_exit()
            raise
        self.config_file_path = str(config_file_path)
        self.process_group = process_group
        self.params_have_main_grad = bool(params_have_main_grad)
        self._config = config
        self._engine: MonitorEngine | None = None
        self._hooks = None
        if opt_ty is not None:
            get_logger().info("msprobe monitor: opt_ty is not needed: the optimizer's type is read from it")

    # ------------------------------------------------------------------ what a framework supplies
    def _is_model(self, model) -> bool:
        raise NotImplementedError

    def _is_optimizer(self, optimizer) -> bool:
        return optimizer is not None and callable(getattr(optimizer, "step", None))

    def _make_hooks(self, chunks: list, optimizer, grad_acc_steps: int):
        raise NotImplementedError

    def _rank(self) -> int:
        return 0

    # ------------------------------------------------------------------ the reference's API
    def set_monitor(self, model, optimizer, grad_acc_steps=1, tp_group=None, dp_group=None, start_iteration=0):
        """Attach to `model` (a model or a list of model chunks: each chunk's index is its vpp_stage) and
        `optimizer`. Recording starts with the next forward."""
        if self._hooks is not None:
            get_logger().warning("msprobe monitor: set_monitor() was called again; the first model stays monitored")
            return
        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if not chunks or not all(self._is_model(m) for m in chunks):
            raise MonitorConfigError(f"set_monitor(model): model must be {self.model_kind} or a list of them")
        if not self._is_optimizer(optimizer):
            raise MonitorConfigError("set_monitor(optimizer=...): the optimizer (with a step() method) is needed")
        if isinstance(grad_acc_steps, bool) or not isinstance(grad_acc_steps, int) or grad_acc_steps < 1:
            raise MonitorConfigError(f"set_monitor(grad_acc_steps=...): a positive integer, got {grad_acc_steps!r}")
        if isinstance(start_iteration, bool) or not isinstance(start_iteration, int) or start_iteration < 0:
            raise MonitorConfigError(f"set_monitor(start_iteration=...): a non-negative integer, got "
                                     f"{start_iteration!r}")
        self._hooks = self._make_hooks(chunks, optimizer, grad_acc_steps)
        self._engine = MonitorEngine(self._config, self._rank(), self._hooks, config_path=self.config_file_path,
                                     start_iteration=start_iteration)
        self._hooks.engine = self._engine
        self._hooks.attach()
        self._engine.start()
        _live.add(self)

    def monitor_gnorm_with_ad(self, model, optimizer=None, grad_acc_steps=1, tp_group=None, dp_group=None,
                              start_iteration=0):
        """The reference's former name of set_monitor."""
        optimizer = optimizer if optimizer is not None else getattr(self, "_wrapped_optimizer", None)
        self.set_monitor(model, optimizer, grad_acc_steps, tp_group, dp_group, start_iteration)

    def set_wrapped_optimizer(self, optimizer) -> None:
        """The reference's former way to pass the optimizer (then monitor_gnorm_with_ad)."""
        self._wrapped_optimizer = optimizer

    def record_loss(self, loss) -> None:
        """Record this micro-step's loss explicitly (then only this call records it)."""
        if self._hooks is not None and self._hooks.engine is not None:
            with not_recording():
                self._hooks.record_loss(loss)

    def reload_xy(self, xy_distribution=False) -> None:
        """Switch activation monitoring on or off (the reference's former way; dynamic_on is the new one)."""
        self._reconfigure(xy_distribution=bool(xy_distribution))

    @property
    def ops(self) -> tuple:
        return self._config.ops

    @ops.setter
    def ops(self, ops) -> None:
        from msprobe.monitor.config import _ops

        warnings: list = []
        self._reconfigure(ops=_ops(list(ops), warnings))
        for line in warnings:
            get_logger().warning("msprobe monitor: %s", line)

    def generate_xy_metrics(self) -> tuple:
        """({tag: {op: value}} of the activations, the same of their gradients) of the step under way (or the last
        one), tags as the reference's ("0:fc1.output:0/rank0/actv")."""
        return self._metrics("actv"), self._metrics("actv_grad")

    def generate_wgrad_metrics(self, post_grad_dict=None) -> tuple:
        """({tag: {op: value}} of the gradients after reduction, the same before)."""
        return self._metrics("grad_reduced"), self._metrics("grad_unreduced")

    def close(self) -> None:
        """Write what is pending and remove every hook (also done at exit)."""
        with not_recording():
            if self._engine is not None:
                self._engine.close()
            if self._hooks is not None:
                self._hooks.detach()
        _live.discard(self)

    @property
    def output_directory(self) -> str | None:
        """This rank's folder of CSV files (None until a step was written)."""
        return self._engine.directory if self._engine is not None else None

    # ------------------------------------------------------------------ internals
    def _reconfigure(self, **changes) -> None:
        self._config = replace(self._config, **changes)
        if self._engine is not None:
            self._engine._set_up(self._config)

    def _metrics(self, group: str) -> dict:
        engine = self._engine
        if engine is None:
            return {}
        records = engine.last_records
        with not_recording():
            self._hooks.settle()
            if len(engine.buffer):
                records = engine.buffer.records(engine.rank, engine.step, engine.config.record_ops,
                                                self._hooks.to_host)
        if records is None:
            return {}
        found = {}
        for i, row_group in enumerate(records.group):
            if row_group != group:
                continue
            micro = f":{records.micro_step[i]}" if has_micro_step(group) else ""
            tag = f"{records.vpp_stage[i]}:{records.name[i]}{micro}/rank{records.rank}/{group}"
            found[tag] = {op: float(records.values[i, j]) for j, op in enumerate(records.ops)}
        return found


def unrecorded(method):
    """A hook body of the monitor's: a PrecisionDebugger running at the same time records none of its ops (a dump
    is the same with the monitor on)."""
    @functools.wraps(method)
    def body(*args, **kwargs):
        with not_recording():
            return method(*args, **kwargs)
    return body


class HooksBase:
    """What a framework's hooks object does the same way. It provides detach(), take_loss(loss),
    _activations_failed(), _pre_step(grads), _params_rows(group), _moments(), _update_ratio() and _end_step(),
    which ends with _close_step()."""

    def __init__(self, monitor: TrainerMonBase, chunks: list, optimizer, inner, grad_acc_steps: int):
        self.monitor = monitor
        self.chunks = chunks
        self.optimizer = optimizer
        self.inner = inner                      # the optimizer holding the parameters and states (None: unknown)
        self.grad_acc_steps = grad_acc_steps
        self.engine: MonitorEngine | None = None
        self.config = None                      # the config the hooks are installed for (None: none installed)
        self.explicit_loss = False
        self._wrapped_step = None

    def _guard(self, part: str, func, *args):
        """func(*args); a failure switches `part` off (engine.fail) and training goes on."""
        try:
            return func(*args)
        except MonitorStop:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            self.engine.fail(part, exc)
            if part == "activations":
                self._activations_failed()
            return None

    def _wrap_step(self) -> None:
        """An optimizer without step hooks: its step() wrapped (the gradients it is given are not known)."""
        original = self.optimizer.step

        def step(*args, **kwargs):
            self._pre_step(None)
            result = original(*args, **kwargs)
            self._post_step()
            return result
        self._wrapped_step = step
        self.optimizer.step = step

    def record_loss(self, loss) -> None:
        self.explicit_loss = True
        self._guard("loss", self.take_loss, loss)

    step_call = "the optimizer's step"          # the call that ends a step, and what skips it, for a warning
    skipped_example = "inf/NaN gradients"

    def _begin_micro_step(self, step_ended: bool) -> None:
        """A forward of the model starts a micro-step. `step_ended`: every micro-step of this step ran its backward
        and no optimizer step came (a skipped step): the step ends here. The parameters as the step starts."""
        engine = self.engine
        try:
            if step_ended:
                engine.warn_once("skipped", "step %d ended without %s (a skipped step, e.g. %s, or more "
                                 "micro-batches per step than grad_acc_steps=%d); the step count follows the "
                                 "forwards", engine.step, self.step_call, self.skipped_example, self.grad_acc_steps)
                self._end_step()
            engine.begin_micro_step()
            config = self.config
            if engine.micro_step == 0 and engine.collecting and config is not None and config.param_distribution \
                    and engine.ok("parameters"):
                self._guard("parameters", self._params_rows, "param_origin")
        except MonitorStop:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's training must go on
            engine.fail("the step boundary", exc)

    @unrecorded
    def _post_step(self) -> None:
        """After the optimizer's step: the parameters, the moments and the update ratio of the step; its end."""
        engine = self.engine
        if engine is None:
            return
        config = self.config
        if engine.collecting and config is not None:
            if config.param_distribution and engine.ok("parameters"):
                self._guard("parameters", self._params_rows, "param_updated")
            if config.mv_distribution and engine.ok("optimizer states"):
                self._guard("optimizer states", self._moments)
            if config.ur_distribution and engine.ok("update ratio"):
                self._guard("update ratio", self._update_ratio)
        self._old_params = []
        self._end_step()

    def _close_step(self) -> None:
        """The engine ends the step; `action: stop` or print_struct: every hook comes off and MonitorStop ends the
        training."""
        message = self.engine.end_step()
        if message:
            get_logger().warning("%s", message)
            self.detach()
            raise MonitorStop(message)


_live: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for monitor in list(_live):
        try:
            monitor.close()
        except Exception:  # noqa: BLE001 - the interpreter is shutting down
            pass


def one_line_on_exit() -> None:
    """An uncaught MonitorConfigError ends the script with its one line, not a traceback."""
    previous = sys.excepthook
    if getattr(previous, "_msprobe_monitor", False):
        return

    def hook(kind, value, traceback):
        if isinstance(value, MonitorConfigError):
            print(f"msprobe monitor: {value}", file=sys.stderr)
            return
        previous(kind, value, traceback)
    hook._msprobe_monitor = True
    sys.excepthook = hook
