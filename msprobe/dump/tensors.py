"""Open tensor files of dump_tensor_data without running code: `.npy` always, `.pt` (PyTorch's zip format) by a
reader of our own for plain tensors of the common dtypes, by torch (`weights_only`) for anything else."""

from __future__ import annotations

import collections
import io
import math
import mmap
import os
import pickle
import re
import struct
import sys
import warnings
import zipfile
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from msprobe.dump.paths import safe_tensor_path
from msprobe.optional import require


class TensorReadError(Exception):
    """A tensor file could not be read; the message becomes the row's note."""


@dataclass(frozen=True)
class TensorData:
    """The values of one tensor file: `array` in the file's own dtype, except bfloat16, which numpy has no dtype
    for: its raw 16-bit patterns (uint16, the upper half of the float32 of the same value) with `bfloat16` set.
    `widened()` is the array numpy computes with (bfloat16 widened to float32 exactly)."""

    array: np.ndarray
    bfloat16: bool = False

    def widened(self) -> np.ndarray:
        return bfloat16_to_float32(self.array) if self.bfloat16 else self.array


def bfloat16_to_float32(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (uint16), exactly: the pattern is the upper half of the float32.
    `out` (float32, bits' shape) receives them when given."""
    wide = np.empty(bits.shape, np.uint32) if out is None else out.view(np.uint32)
    np.copyto(wide, bits, casting="unsafe")
    np.left_shift(wide, np.uint32(16), out=wide)
    return wide.view(np.float32)


_TORCH_FLOAT_UPCAST = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def load_tensor(tensor_dir: str, data_name: str) -> np.ndarray:
    """Load one tensor as a numpy array (large files memory-mapped); bfloat16/float8 become float32."""
    return read_tensor(tensor_dir, data_name).widened()


def read_tensor(tensor_dir: str, data_name: str) -> TensorData:
    """Read one tensor file (large files memory-mapped); bfloat16 stays in its bit patterns (TensorData), float8
    of a .pt file becomes float32."""
    path, reason = safe_tensor_path(tensor_dir, data_name)
    if path is None:
        raise TensorReadError(reason)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return TensorData(_load_npy(path, data_name))
    if suffix == ".pt":
        return _load_pt(path, data_name)
    raise TensorReadError(f"tensor file {data_name} has an unsupported suffix (expected .npy or .pt).")


MMAP_ABOVE_BYTES = 1 << 20   # larger files are memory-mapped (no copy); smaller ones read at once


def _file_bytes(handle, start: int, size: int, file_size: int) -> memoryview | None:
    """`size` bytes of an open file of `file_size` bytes from offset `start`: a memory map of the file when large
    (read-only), else read; None when the file is shorter."""
    if start < 0 or size < 0 or start + size > file_size:
        return None
    if size > MMAP_ABOVE_BYTES:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(mapped)[start:start + size]
    data = os.pread(handle.fileno(), size, start)
    return memoryview(data) if len(data) == size else None


# the header numpy writes for a plain array: parsed without numpy's literal_eval (which costs more than reading a
# small tensor); any other header goes through np.load
_NPY_HEADER = re.compile(r"\{'descr': '([<>|=][biufc]\d+)', 'fortran_order': False, 'shape': \(([\d, ]*)\), \}\s*")


class NpyFile(NamedTuple):
    """One .npy file: its array, and (for a plain header, else -1) where its data part starts and its bytes."""

    array: np.ndarray
    data_offset: int = -1
    data_bytes: int = -1


def _plain_npy(path: str) -> NpyFile | None:
    """The array of a .npy file with numpy's plain header (C order, a numeric dtype), else None."""
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = os.pread(handle.fileno(), min(size, 4096), 0)
        if head[:6] != b"\x93NUMPY" or len(head) < 12 or head[6] not in (1, 2, 3):
            return None
        start = 10 if head[6] == 1 else 12
        end = start + int.from_bytes(head[8:start], "little")
        found = _NPY_HEADER.fullmatch(head[start:end].decode("latin-1")) if end <= len(head) else None
        if found is None:
            return None
        shape = tuple(int(part) for part in found.group(2).split(",") if part.strip())
        dtype = np.dtype(found.group(1))
        if not dtype.isnative:
            return None
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        data = (memoryview(head)[end:end + nbytes] if nbytes <= MMAP_ABOVE_BYTES and end + nbytes <= len(head) else
                _file_bytes(handle, end, nbytes, size))
    if data is None:
        return None
    return NpyFile(np.frombuffer(data, dtype, count=count).reshape(shape), end, size - end)


def open_npy(path: str) -> NpyFile:
    """np.load(path, allow_pickle=False), with files above MMAP_ABOVE_BYTES memory-mapped; numpy's plain headers
    (C order, a numeric dtype) are parsed without literal_eval, and the file's data part is located then. Like
    np.load, it reads the first elements of a data part longer than the shape (MindSpore saves a view with its
    whole storage)."""
    found = _plain_npy(path)
    if found is None:
        large = os.path.getsize(path) > MMAP_ABOVE_BYTES
        found = NpyFile(np.load(path, mmap_mode="r" if large else None, allow_pickle=False))
    return found


def read_npy(path: str) -> np.ndarray:
    """The array of a .npy file (open_npy)."""
    return open_npy(path).array


def _load_npy(path: str, data_name: str) -> np.ndarray:
    try:
        array = read_npy(path)
    except ValueError as exc:
        # Object arrays cannot be memory-mapped and are refused (no pickle); other errors mean a bad file.
        raise TensorReadError(f"tensor file {data_name} is not a readable .npy file ({exc}).") from None
    except OSError as exc:
        raise TensorReadError(f"tensor file {data_name} could not be read ({exc}).") from None
    if not isinstance(array, np.ndarray):
        raise TensorReadError(f"tensor file {data_name} does not hold one array.")
    if array.dtype.kind not in "biufc":
        raise TensorReadError(f"tensor file {data_name} holds dtype {array.dtype}, which is not numeric.")
    return array


# ---- .pt files -----------------------------------------------------------------------------------------------

class _NotPlain(Exception):
    """The file is not a plain tensor of a storage type the reader knows: torch reads it."""


class _StorageType(NamedTuple):
    dtype: np.dtype
    bfloat16: bool = False


_STORAGES = {"FloatStorage": _StorageType(np.dtype("<f4")), "DoubleStorage": _StorageType(np.dtype("<f8")),
             "HalfStorage": _StorageType(np.dtype("<f2")), "BFloat16Storage": _StorageType(np.dtype("<u2"), True),
             "LongStorage": _StorageType(np.dtype("<i8")), "IntStorage": _StorageType(np.dtype("<i4")),
             "ShortStorage": _StorageType(np.dtype("<i2")), "CharStorage": _StorageType(np.dtype("i1")),
             "ByteStorage": _StorageType(np.dtype("u1")), "BoolStorage": _StorageType(np.dtype("?")),
             "ComplexFloatStorage": _StorageType(np.dtype("<c8")),
             "ComplexDoubleStorage": _StorageType(np.dtype("<c16"))}


class _Storage(NamedTuple):
    kind: _StorageType
    key: str
    numel: int


class _Tensor(NamedTuple):
    storage: _Storage
    offset: int
    size: tuple
    stride: tuple


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, _Storage) or backward_hooks or metadata:
        raise _NotPlain("tensor")
    return _Tensor(storage, storage_offset, tuple(size), tuple(stride))


class _TensorUnpickler(pickle.Unpickler):
    """Unpickles torch.save's data.pkl of one plain tensor; every other global stops it (no code is ever run: the
    only callables it hands the pickle are _rebuild_tensor_v2 above and OrderedDict)."""

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "torch" and name in _STORAGES:
            return _STORAGES[name]
        raise _NotPlain(f"{module}.{name}")

    def persistent_load(self, pid):
        if (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)
                and isinstance(pid[2], str) and type(pid[4]) is int and pid[4] >= 0):
            return _Storage(pid[1], pid[2], pid[4])
        raise _NotPlain("storage")


def _ints(values) -> bool:
    return isinstance(values, tuple) and all(type(v) is int and v >= 0 for v in values)


_LOCAL = struct.Struct("<4s5H3L2H")              # a zip member's local header: 30 bytes, then its name and extra


def _data_start(handle, info: zipfile.ZipInfo) -> int:
    """Where the bytes of a stored (uncompressed) zip member start in the file (zipfile has no public way)."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise _NotPlain("compressed member")
    handle.seek(info.header_offset)
    local = handle.read(_LOCAL.size)
    if len(local) != _LOCAL.size or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local header")
    fields = _LOCAL.unpack(local)
    return info.header_offset + _LOCAL.size + fields[9] + fields[10]


def _member(handle, info: zipfile.ZipInfo) -> bytes:
    """The bytes of a small stored zip member (one pread; zipfile's own reader costs more than a small tensor)."""
    data = os.pread(handle.fileno(), info.file_size, _data_start(handle, info))
    if len(data) != info.file_size:
        raise zipfile.BadZipFile("truncated member")
    return data


def _read_plain_pt(path: str) -> TensorData | None:
    """A plain tensor of a .pt file in PyTorch's zip format, read without torch; None when the file is something
    else (another format, other objects, other storage types); damaged files raise."""
    try:
        return _plain_pt(path)
    except (_NotPlain, zipfile.BadZipFile):
        return None


def _plain_pt(path: str) -> TensorData:
    if sys.byteorder != "little":
        raise _NotPlain("byte order")
    with open(path, "rb", buffering=0) as handle:
        archive = zipfile.ZipFile(handle)
        names = archive.namelist()
        prefix = names[0].split("/", 1)[0] if names and "/" in names[0] else ""
        members = archive.NameToInfo
        if not prefix or f"{prefix}/data.pkl" not in members:
            raise _NotPlain("layout")
        order = members.get(f"{prefix}/byteorder")
        if order is not None and _member(handle, order) != b"little":
            raise _NotPlain("byte order")
        tensor = _TensorUnpickler(io.BytesIO(_member(handle, members[f"{prefix}/data.pkl"]))).load()
        if not isinstance(tensor, _Tensor) or not (_ints((tensor.offset,)) and _ints(tensor.size)
                                                   and _ints(tensor.stride)) or len(tensor.size) != len(tensor.stride):
            raise _NotPlain("tensor")
        storage = tensor.storage
        dtype = storage.kind.dtype
        nbytes = storage.numel * dtype.itemsize
        info = members.get(f"{prefix}/data/{storage.key}")
        if info is None or info.file_size < nbytes:
            raise _NotPlain("storage record")
        data = _file_bytes(handle, _data_start(handle, info), nbytes, os.fstat(handle.fileno()).st_size)
    if data is None:
        raise _NotPlain("storage record")
    flat = np.frombuffer(data, dtype, count=storage.numel)
    return TensorData(_view(flat, tensor), storage.kind.bfloat16)


def _view(flat: np.ndarray, tensor: _Tensor) -> np.ndarray:
    """The tensor's elements in its storage: offset, sizes and strides checked against the storage's length."""
    size, stride = tensor.size, tensor.stride
    if 0 in size:
        return np.empty(size, flat.dtype)
    if tensor.offset + sum((n - 1) * step for n, step in zip(size, stride)) >= flat.size:
        raise _NotPlain("extent")
    contiguous, step = True, 1
    for n, given in zip(reversed(size), reversed(stride)):
        if n != 1 and given != step:
            contiguous = False
            break
        step *= n
    if contiguous:
        return flat[tensor.offset:tensor.offset + math.prod(size)].reshape(size)
    return np.lib.stride_tricks.as_strided(flat[tensor.offset:], size, tuple(s * flat.itemsize for s in stride),
                                           writeable=False)


def _load_pt(path: str, data_name: str) -> TensorData:
    try:
        data = _read_plain_pt(path)
    except Exception:  # noqa: BLE001 - a damaged file: torch says what is wrong with it
        data = None
    return data if data is not None else TensorData(_torch_load_pt(path, data_name))


def _torch_load_pt(path: str, data_name: str) -> np.ndarray:
    torch = require("torch", f"reading the .pt tensor file {data_name}", TensorReadError)
    try:
        with warnings.catch_warnings():     # torch warns on stderr about the pickle protocol of hostile files
            warnings.simplefilter("ignore")
            tensor = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # torch's own text advises weights_only=False, which would run the code such a file may carry
        raise TensorReadError(f"tensor file {data_name} could not be read by torch as plain tensors (a damaged "
                              "file, or objects other than tensors, which are never unpickled: that could run "
                              "code); refused.") from None
    except Exception as exc:  # torch raises many types for corrupt files
        raise TensorReadError(f"tensor file {data_name} could not be read by torch "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}).") from None
    if not isinstance(tensor, torch.Tensor):
        raise TensorReadError(f"tensor file {data_name} does not hold a tensor.")
    tensor = tensor.detach()
    if str(tensor.dtype).replace("torch.", "") in _TORCH_FLOAT_UPCAST:
        tensor = tensor.float()
    try:
        return tensor.resolve_conj().resolve_neg().numpy()
    except (TypeError, RuntimeError) as exc:
        raise TensorReadError(f"tensor file {data_name} has a dtype numpy cannot hold ({exc}).") from None
