"""Level L2 of the MindSpore collector: MindSpore's own kernel-by-kernel dump, configured and stepped by the
debugger (GRAPH_MODE, and PyNative). MindSpore writes `rank_<id>/Net/<graph>/<step>/<kernel files>.npy`,
`graphs/*.ir` and `execution_order/`; where it cannot save statistics itself (CPU), each step's tensors are
reduced here to MindSpore's `statistic.csv` and then removed.

MindSpore reads its dump configuration (MINDSPORE_DUMP_CONFIG) once, when the first graph is compiled, so the
debugger must be made before the network is first called; made later it logs one error and records nothing,
instead of writing an empty dump.

MindSpore's CPU kernel dump ignores `_dump_start`/`_dump_stop` (its dynamic switch is read by the GPU and Ascend
dumps only): it dumps every iteration its `iteration` setting names. What it does read at run time is its
iteration counter (`_set_init_iter`), so the debugger sets that counter to the recorded step at start() and parks
it at PARKED, a step `iteration` never names, at stop() (and before the first start()): nothing is dumped outside
the recorded steps, on every device.

MindSpore accepts only letters, digits, '-', '_' and '/' in its dump path; any other dump_path (a dot in
`tmp.XXXX` or `exp_v1.2/`) is given to MindSpore as a link of an accepted name in the temporary folder, which
points at the dump_path: the files land in the dump_path itself, and the link is removed when the process ends."""

from __future__ import annotations

import atexit
import csv
import glob
import hashlib
import io
import json
import os
import re
import shutil
import tempfile

import mindspore as ms
import numpy as np

from msprobe.collect.config import DumpConfig, DumpConfigError
from msprobe.collect.debugger import DebuggerBase
from msprobe.collect.stats import array_statistics
from msprobe.compare.kernel import kernel_values, parse_kernel_name
from msprobe.io import write_text
from msprobe.log import get_logger
from msprobe.names import printable

CONFIG_NAME = "kernel_kbyk_dump.json"        # written at the dump path, as the reference collector does
NET_NAME = "Net"
STATISTIC_CSV = "statistic.csv"
HEAD = ("Op Type", "Op Name", "Task ID", "Stream ID", "Timestamp", "IO", "Slot", "Data Size", "Data Type", "Shape")
# summary_mode -> MindSpore's statistic_category and the columns it writes
CATEGORIES = {"statistics": (("max", "Max Value"), ("min", "Min Value"), ("avg", "Avg Value"),
                             ("l2norm", "L2Norm Value")),
              "md5": (("hash:md5", "MD5"),)}
INPUT_OUTPUT = {"all": 0, "input": 1, "output": 2}
DEVICES_WITH_STATISTICS = ("GPU", "Ascend")
EXPANDED_STEPS = 1000            # up to this many steps, `iteration` lists each, as the reference does
PARKED = 2**32 - 1               # MindSpore's iteration counter between recorded steps: `iteration` never names it
LAST_STEP = PARKED - 1           # the last step MindSpore can dump (its counter is an unsigned 32-bit number)
_ACCEPTED_PATH = re.compile(r"[A-Za-z0-9_/-]+")     # what MindSpore's dump path may hold (it refuses the rest)
_TOKENS = {"\x00msprobe:nan": "nan", "\x00msprobe:inf": "inf", "\x00msprobe:ninf": "-inf"}


class TooLateError(DumpConfigError):
    """MindSpore compiled a graph before the kernel dump was configured: it would dump nothing."""


# settings MindSpore was given in this process (it reads them once): a later debugger may only repeat them
_CONFIGURED: list = []


def host_statistics(device: str) -> bool:
    """Whether statistics are computed here from dumped tensors (MindSpore saves them itself on GPU and Ascend)."""
    return device not in DEVICES_WITH_STATISTICS


def dump_settings(config: DumpConfig, device: str) -> dict:
    """MindSpore's dump configuration for `config`, as the reference collector maps it: step -> iteration,
    rank -> support_device, list -> kernels (op types or full kernel names), data_mode -> input_output."""
    if config.scope:
        raise DumpConfigError("config 'scope' is not available at level L2: MindSpore's kernel dump selects "
                              "kernels by 'list' (op types such as \"Conv2D\" or full kernel names such as "
                              "\"Default/network-Net/conv-Conv2d/Conv2D-op0\"); move the names to 'list'")
    modes = set(config.data_mode)
    if not modes <= set(INPUT_OUTPUT):
        raise DumpConfigError(f"config 'data_mode' at level L2 must be among all, input, output (a kernel has no "
                              f"forward or backward side), got {sorted(modes - set(INPUT_OUTPUT))}")
    input_output = INPUT_OUTPUT[modes.pop()] if len(modes) == 1 else 0
    statistic_by_device = config.task == "statistics" and not host_statistics(device)
    common = {"dump_mode": 1 if config.api_list else 0,
              "path": mindspore_path(config.dump_path),
              "net_name": NET_NAME,
              "iteration": _iteration(config.step),
              "saved_data": "statistic" if statistic_by_device else "tensor",
              "input_output": input_output,
              "kernels": list(config.api_list),
              "support_device": list(config.rank) if config.rank else list(range(8)),
              "statistic_category": ([name for name, _ in CATEGORIES[config.summary_mode]]
                                     if statistic_by_device else [])}
    e2e = {"enable": True, "trans_flag": True}
    if statistic_by_device:
        e2e.update(stat_calc_mode="host", device_stat_precision_mode="high")
    return {"common_dump_settings": common, "e2e_dump_settings": e2e}


def _iteration(steps) -> str:
    """MindSpore's `iteration`: every step, as the reference writes it ("0|2|4|5|6"); a long range as MindSpore's
    own "a-b" (the reference would write each of its steps). Every step is "0-4294967294", not MindSpore's "all":
    PARKED must stay outside (it is where the counter waits between recorded steps)."""
    intervals = [(low, min(high, LAST_STEP)) for low, high in steps.intervals if low <= LAST_STEP] \
        if steps else [(0, LAST_STEP)]
    if sum(high - low + 1 for low, high in intervals) <= EXPANDED_STEPS:
        return "|".join(str(step) for low, high in intervals for step in range(low, high + 1))
    return "|".join(str(low) if low == high else f"{low}-{high}" for low, high in intervals)


# ---------------------------------------------------------------------------------------------- the dump path
_LINKS: list = []          # the private folders holding a link for MindSpore (removed at the process's end)
_LINK_OWNER: list = []     # the pid of the process that made them


def mindspore_path(dump_path: str) -> str:
    """The path MindSpore is given for `dump_path`: itself when MindSpore accepts it, else a link of an accepted
    name in a private folder of the temporary folder, pointing at dump_path (made once per process)."""
    if _ACCEPTED_PATH.fullmatch(dump_path):
        return dump_path
    for _folder, link in _LINKS:
        if os.path.realpath(link) == os.path.realpath(dump_path):
            return link
    fix = ("choose a dump_path of letters, digits, '-', '_' and '/' only, or set TMPDIR to a writable folder "
           "whose path has only those")
    base = tempfile.gettempdir()
    if not _ACCEPTED_PATH.fullmatch(os.path.abspath(base)):
        raise DumpConfigError(f"MindSpore's kernel dump refuses the dump_path {dump_path!r} (it accepts only "
                              f"letters, digits, '-', '_' and '/'), and the temporary folder {base!r} cannot hold "
                              f"a link for it: {fix}")
    try:
        folder = tempfile.mkdtemp(prefix="msprobe_l2_", dir=base)
        link = os.path.join(folder, "dump")
        os.symlink(dump_path, link, target_is_directory=True)
    except OSError as exc:
        raise DumpConfigError(f"MindSpore's kernel dump refuses the dump_path {dump_path!r} (it accepts only "
                              f"letters, digits, '-', '_' and '/'), and a link to it could not be made in "
                              f"{base!r} ({exc.strerror or exc}): {fix}") from None
    if not _LINKS:
        atexit.register(_remove_links)
        _LINK_OWNER[:] = [os.getpid()]
    _LINKS.append((folder, link))
    return link


def _remove_links() -> None:
    """At the end of the process that made the links (a forked child's exit leaves them to its parent)."""
    if _LINK_OWNER and _LINK_OWNER[0] != os.getpid():
        return
    for folder, link in _LINKS:
        if os.path.islink(link):
            os.unlink(link)
        shutil.rmtree(folder, ignore_errors=True)       # empty but for anything MindSpore wrote after the link went
    _LINKS.clear()


def _compiled_graphs() -> int:
    """How many graphs (GRAPH_MODE networks, @ms.jit functions) this process has compiled so far."""
    from mindspore.common import api

    return len(getattr(api, "function_phases", ()))


def _controls():
    from mindspore import _c_expression

    return _c_expression


def configure(settings: dict) -> None:
    """Write kernel_kbyk_dump.json, point MINDSPORE_DUMP_CONFIG at it and let MindSpore parse it now (so that
    its own refusals surface here, as one line)."""
    if _CONFIGURED:
        if _CONFIGURED[0] != settings:
            raise DumpConfigError("MindSpore reads its kernel dump configuration once per process: a second level "
                                  "L2 debugger must use the same settings (task, dump_path, step, rank, list, "
                                  "data_mode) as the first")
        return
    if _compiled_graphs():
        raise TooLateError("level L2 must be set up before the first graph is compiled: MindSpore has already "
                           "compiled a graph in this process and would dump nothing; create the PrecisionDebugger "
                           "before the first call of the network (or of any @ms.jit function)")
    path = os.path.join(settings["common_dump_settings"]["path"], CONFIG_NAME)
    try:
        write_text(path, json_text(settings))
    except OSError as exc:
        raise DumpConfigError(f"cannot write {path}: {exc.strerror or exc}; choose a writable dump_path") from None
    previous = os.environ.get("MINDSPORE_DUMP_CONFIG")
    if previous and previous != path:
        get_logger().warning("MINDSPORE_DUMP_CONFIG=%s is replaced by %s (level L2)", previous, path)
    os.environ["MINDSPORE_DUMP_CONFIG"] = path
    controls = _controls()
    try:
        controls._dump_set_dynamic()
        controls._set_init_iter(PARKED)         # nothing is dumped before the first start()
    except RuntimeError as exc:         # not left for the first compile to trip over
        if previous is None:
            os.environ.pop("MINDSPORE_DUMP_CONFIG", None)
        else:
            os.environ["MINDSPORE_DUMP_CONFIG"] = previous
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DumpConfigError(f"MindSpore refused the kernel dump configuration {path}: {text}") from None
    _CONFIGURED.append(settings)


def json_text(settings: dict) -> str:
    return json.dumps(settings, indent=4)


# ---------------------------------------------------------------------------------------------- statistic.csv
def _cell(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return _TOKENS.get(value, value)
    return repr(value) if isinstance(value, float) else str(value)


def _shape(shape: tuple) -> str:
    return "(" + ",".join(str(size) for size in shape) + ")"


def statistic_row(name: str, array: np.ndarray, summary_mode: str, parsed: tuple | None = None,
                  size: int | None = None) -> list | None:
    """The statistic.csv row of one kernel tensor file (None when the name is not a kernel file name); `size` is
    the tensor's bytes when they are not the array's (float32 values of a float16 tensor, kernel_values)."""
    parsed = parsed or parse_kernel_name(name)
    if parsed is None:
        return None
    op_type, op_name, task_id, stream_id, stamp, io_side, slot = parsed
    dtype = name[:-len(".npy")].rsplit(".", 1)[-1].lower()
    row = [op_type, op_name, task_id, stream_id, str(stamp), io_side, str(slot),
           str(array.nbytes if size is None else size), dtype, _shape(array.shape)]
    if summary_mode == "md5":
        return row + [hashlib.md5(np.ascontiguousarray(array).view(np.uint8).reshape(-1)).hexdigest()]
    stats = array_statistics(array)
    return row + [_cell(stats[key]) for key in ("Max", "Min", "Mean", "Norm")]


_SAID_HALVES: list = []          # the directories said to hold float32 data under float16 headers (info once)


def summarise_directory(directory: str, summary_mode: str) -> int:
    """Reduce the kernel .npy files of one step directory to statistic.csv (rows added to one already there),
    then remove them; the number of rows added. The csv is complete on disk before any tensor is removed. A float16
    file holding float32 data (MindSpore's CPU dump of a float16 op run in float32: kernel_values) is reduced from
    those float32 values, its row keeping the float16 type, and said once per directory."""
    names = sorted(name for name in os.listdir(directory) if name.endswith(".npy"))
    rows, done, halves = [], [], 0
    for name in names:
        parsed = parse_kernel_name(name)
        if parsed is None:
            continue
        path = os.path.join(directory, name)
        try:
            array, half = kernel_values(path)
        except (OSError, ValueError, EOFError) as exc:     # kept on disk, and said
            get_logger().warning("msprobe dump: %s is not a readable .npy file (%s); it is kept and has no row in "
                                 "statistic.csv", printable(path), exc)
            continue
        halves += half
        rows.append(statistic_row(name, array, summary_mode, parsed, array.size * 2 if half else None))
        done.append(path)
    if halves:
        say = get_logger().debug if _SAID_HALVES else get_logger().info
        _SAID_HALVES.append(directory)
        say("msprobe dump: %d kernel file(s) of %s hold float32 data under a float16 header "
                          "(MindSpore's CPU dump of float16 ops its CPU kernels run in float32): their statistics "
                          "are those of the float32 values (said once; then at debug level)", halves, printable(directory))
    if not rows:
        return 0
    rows.sort(key=lambda row: (int(row[4]), row[5], int(row[6])))
    header = ",".join(HEAD + tuple(column for _, column in CATEGORIES[summary_mode]))
    target = os.path.join(directory, STATISTIC_CSV)
    text = io.StringIO()
    if os.path.exists(target):
        with open(target, encoding="utf-8") as handle:
            text.write(handle.read())
    else:
        text.write(header + "\n")
    writer = csv.writer(text, lineterminator="\n")
    for row in rows:           # MindSpore ends each row with a separator
        writer.writerow([*row, ""])
    write_text(target, text.getvalue())
    for path in done:
        os.unlink(path)
    return len(rows)


def step_directories(dump_path: str, step: int) -> list:
    """The data directories MindSpore wrote for `step`: rank_<id>/Net/<graph>/<step>."""
    pattern = os.path.join(glob.escape(dump_path), "rank_*", NET_NAME, "*", str(step))
    return sorted(path for path in glob.glob(pattern) if os.path.isdir(path))


# ---------------------------------------------------------------------------------------------- the debugger
class KernelDebugger(DebuggerBase):
    """PrecisionDebugger(level="L2"): start() points MindSpore's iteration counter at the step and calls
    `_dump_start`, stop() calls `_dump_stop`, waits for the step's kernels, parks the counter (nothing is dumped
    until the next start()) and writes the step's statistics where MindSpore cannot."""

    framework = "mindspore"
    suffix = ".npy"

    def __init__(self, config: DumpConfig, model=None):
        super().__init__(config, model)
        self.device = ms.get_context("device_target")
        self.host_statistics = config.task == "statistics" and host_statistics(self.device)
        settings = dump_settings(config, self.device)          # option errors raise
        self.inert = False
        try:
            configure(settings)
        except TooLateError as exc:     # made during training: one error line, and the training goes on
            get_logger().error("msprobe dump: %s; this debugger records nothing", exc)
            self.inert = True
        self.writer = _StepEnd(self)
        self._step_recorded = None
        self._reported_empty = False
        self._dumped_once = False

    # DebuggerBase hooks
    def _rank(self):
        from mindspore.communication import GlobalComm, get_rank

        return get_rank() if GlobalComm.INITED else None

    def _start(self, models: list) -> None:
        if not self.inert:
            super()._start(models)

    def _install(self, models: list) -> None:
        self._step_recorded = self.current_step
        controls = _controls()
        controls._set_init_iter(min(self.current_step, LAST_STEP))
        controls._dump_start()

    def _uninstall(self) -> None:
        _controls()._dump_stop()

    def _save(self, array, path: str) -> None:       # MindSpore writes the kernel files itself
        raise NotImplementedError

    def finish_step(self) -> None:
        """After stop(): wait for the kernels, park MindSpore's iteration counter, check that the step was dumped
        (first recorded step; every step with statistics), reduce it to statistics on CPU."""
        step, self._step_recorded = self._step_recorded, None
        if step is None:
            return
        _synchronize(self.device)
        _controls()._set_init_iter(PARKED)
        if self._dumped_once and not self.host_statistics:
            return              # tensors: MindSpore's files, checked at the first recorded step only
        directories = step_directories(self.config.dump_path, step)
        if not directories:
            if not self._reported_empty:
                self._reported_empty = True
                get_logger().error("msprobe dump: level L2 dumped no kernel at step %d under %s: was the network "
                                   "compiled before the PrecisionDebugger was created (create it before the first "
                                   "call of the network), or does 'list' name no kernel of it?", step,
                                   printable(self.config.dump_path))
            return
        self._dumped_once = True
        if self.host_statistics:
            for directory in directories:
                summarise_directory(directory, self.config.summary_mode)


def _synchronize(device: str) -> None:
    """Wait for the kernels MindSpore launched. On CPU, `ms.runtime.synchronize()` logs "CPU device is not
    supported" (and skips the wait) at its first call: the runtime's own synchronize is called instead."""
    if device == "CPU":
        _controls().synchronize()
    else:
        ms.runtime.synchronize()


class _StepEnd:
    """The writer role DebuggerBase gives each recorded step: MindSpore writes the files, so opening does nothing
    and closing finishes the step (statistics on CPU)."""

    def __init__(self, debugger: KernelDebugger):
        self.debugger = debugger
        self.directory = None

    def open(self, directory: str) -> None:
        self.directory = directory

    def close(self, incomplete: str | None = None) -> None:
        self.debugger.finish_step()

    def forget(self) -> None:
        self.directory = None

    def call_soon(self, job) -> None:
        job()
