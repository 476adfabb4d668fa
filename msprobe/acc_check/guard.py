"""What acc_check and op_generate refuse to replay, decided from the dump record before anything is allocated or
run: APIs that touch files, processes or the network (a dump someone shares must not make the checker write
where it says), and APIs whose tensors would not fit the memory budget (estimated from the dumped shapes and
dtypes). Framework-independent: no torch or mindspore import."""

from __future__ import annotations

import math
import os
import re

from msprobe.acc_check.common import TENSOR_TYPES
from msprobe.dump.paths import safe_tensor_path
from msprobe.frameworks.dtypes import canonical
from msprobe.names import counter

# API names (any dotted part of the name between the API type and the call index) that read or write files,
# start processes or threads, load libraries or talk to other processes over the network. Both frameworks.
SIDE_EFFECT_APIS = {
    "files": ("save", "load", "from_file", "tofile", "save_checkpoint", "load_checkpoint", "load_checkpoint_async",
              "save_mindir", "load_mindir", "export", "import_ir_module", "import_ir_module_from_buffer",
              "TensorDump", "tensor_dump", "get_file_path"),
    "processes": ("compile", "share_memory_", "prepare_multiprocessing_environment", "_load_global_deps",
                  "_preload_cuda_deps", "_preload_cuda_lib", "_import_device_backends", "_import_dotted_name",
                  "_register_device_module", "load_library", "spawn"),
    "the network": ("init_process_group", "new_group", "destroy_process_group", "send", "recv", "isend", "irecv",
                    "batch_isend_irecv", "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "barrier", "hub",
                    "distributed", "rpc"),
}
_SIDE_EFFECT = {name: kind for kind, names in SIDE_EFFECT_APIS.items() for name in names}

# Bytes per element of the dtypes whose names carry no bit width; any other unknown dtype counts as 8 bytes.
_ITEMSIZE = {"bool": 1, "bool_": 1, "half": 2, "float": 4, "double": 8, "long": 8, "int": 4, "short": 2,
             "cfloat": 8, "cdouble": 16}
_BITS = re.compile(r"(\d+)")
DEFAULT_FRACTION = 0.5        # of the memory available when the run starts
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def side_effect(full_name: str) -> str:
    """'' when the API `Type.name[.sub].N` may be replayed; else what it touches (`touches files (save)`)."""
    parts = full_name.split(".")[1:-1] or full_name.split(".")
    for part in parts:
        kind = _SIDE_EFFECT.get(part)
        if kind:
            return f"touches {kind} ({part})"
    return ""


def refusal(full_name: str, data: dict, budget: int | None, file_bytes: int = 0) -> str:
    """'' when acc_check may replay the API; else the SKIP message: an API with side effects, or (with a
    `budget`, for the APIs the backend replays) one whose estimated memory is above it (`file_bytes`: the size
    of the tensor files a real-data run of it loads)."""
    touches = side_effect(full_name)
    if touches:
        return (f"API {full_name} {touches}; acc_check never replays APIs that touch files, processes or the "
                "network. SKIP.")
    return memory_refusal(full_name, data, budget, file_bytes) if budget is not None else ""


def itemsize(dtype) -> int:
    name = canonical(str(dtype)) or ""
    if name in _ITEMSIZE:
        return _ITEMSIZE[name]
    bits = _BITS.search(name)
    if bits and int(bits.group(1)) in (8, 16, 32, 64, 128):
        size = int(bits.group(1)) // 8
        return size * 2 if name.startswith("complex") and size < 8 else size   # complex64 = 2 x float32
    return 8


def tensor_leaves(node):
    """The tensor records below a dump record node; ValueError for one whose shape is not a list of non-negative
    integers (it cannot be rebuilt)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if item.get("type") in TENSOR_TYPES:
                shape = item.get("shape") or []
                if not isinstance(shape, list) or any(isinstance(s, bool) or not isinstance(s, int) or s < 0
                                                       for s in shape):
                    raise ValueError(f"a tensor of shape {str(shape)[:80]} (not a list of non-negative integers)")
                yield item
            elif "type" not in item:
                stack.extend(item.values())


def tensor_bytes(node) -> tuple:
    """(bytes, elements) of every tensor leaf below a dump record node; ValueError for a shape that is not a list
    of non-negative integers."""
    total_bytes = total_elements = 0
    for item in tensor_leaves(node):
        elements = math.prod(item.get("shape") or [])
        total_elements += elements
        total_bytes += elements * itemsize(item.get("dtype"))
    return total_bytes, total_elements


def estimate(forward: dict | None, backward: dict | None) -> int:
    """Peak bytes one replay of the API may hold: its inputs four times (as built, the device copy, the benchmark
    copy at up to twice the size), its outputs as 13 float64 arrays (device and benchmark outputs and the arrays
    of the comparison), all twice when the backward is replayed too (gradients of inputs and outputs). Measured
    on the CPU (peak RSS above the idle process): within 15 % for elementwise APIs, matmul and gelu in float16
    and float32 (docs/acc_check.md)."""
    inputs, outputs = 0, 0
    record = forward or {}
    for key in ("input_args", "input_kwargs"):
        inputs += tensor_bytes(record.get(key))[0]
    outputs += tensor_bytes(record.get("output"))[1]
    total = 4 * inputs + 13 * 8 * outputs
    return 2 * total if backward else total


def memory_refusal(full_name: str, data: dict, budget: int, file_bytes: int = 0) -> str:
    """'' when the API's estimate fits `budget` bytes; else the SKIP message. A real-data run loads its tensor
    files whatever shapes the dump claims: their size (`file_bytes`, four copies as for inputs) counts too."""
    forward, backward = data.get(f"{full_name}.forward"), data.get(f"{full_name}.backward")
    try:
        needed = estimate(forward if isinstance(forward, dict) else None,
                          backward if isinstance(backward, dict) else None)
    except ValueError as exc:
        return f"API {full_name} has {exc}; it cannot be rebuilt. SKIP."
    source = "the dumped shapes and dtypes"
    if 4 * file_bytes > needed:
        needed, source = 4 * file_bytes, "the size of its tensor files"
    if needed > budget:
        return (f"API {full_name} would need about {format_size(needed)} of memory (estimated from {source}), "
                f"more than the budget of {format_size(budget)} (--memory-budget). SKIP.")
    return ""


def tensor_file_bytes(tensor_dir: str, data_names: list) -> int:
    """Bytes of the tensor files a real-data run loads (missing or unsafe names count 0: they are refused
    elsewhere)."""
    total = 0
    for name in data_names:
        path, _ = safe_tensor_path(tensor_dir, name)
        if path:
            try:
                total += os.path.getsize(path)
            except OSError:
                pass
    return total


def available_memory() -> int:
    """Bytes of memory available now: MemAvailable of /proc/meminfo, at most what the cgroup limit leaves; the
    free physical pages elsewhere."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            available = 8 * 1024 ** 3
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file, encoding="ascii") as handle:
                limit = handle.read().strip()
            with open(usage_file, encoding="ascii") as handle:
                usage = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        if counter(limit) is not None and int(limit) < 2 ** 60:
            available = min(available, max(int(limit) - usage, 0))
        break
    return available


def default_budget(workers: int = 1) -> int:
    """Half the available memory, shared by the worker processes that run at once."""
    return int(available_memory() * DEFAULT_FRACTION / max(workers, 1))


def parse_size(text: str) -> int:
    """`2G`, `512M`, `1.5G`, `1000000` (bytes) -> bytes; ValueError with the reason otherwise."""
    value = str(text).strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in SIZE_UNITS and value[-1:] else ""
    number = value[: -1] if unit else value
    try:
        size = float(number) * SIZE_UNITS[unit]
    except ValueError:
        size = -1.0
    if not math.isfinite(size) or size < 1:
        raise ValueError(f"invalid memory budget {text!r} (a size such as 4G, 512M or a number of bytes)")
    return int(size)


def format_size(size: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if size >= SIZE_UNITS[unit]:
            return f"{size / SIZE_UNITS[unit]:.1f} {unit}B"
    return f"{size} B"
