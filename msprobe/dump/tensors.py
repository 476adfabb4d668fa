"""Open tensor files of dump_tensor_data (.npy always, .pt when torch is installed) without running code."""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np

from msprobe.dump.paths import safe_tensor_path
from msprobe.optional import require


class TensorReadError(Exception):
    """A tensor file could not be read; the message becomes the row's note."""


_TORCH_FLOAT_UPCAST = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def load_tensor(tensor_dir: str, data_name: str) -> np.ndarray:
    """Load one tensor as a numpy array (memory-mapped for .npy); bfloat16/float8 become float32."""
    path, reason = safe_tensor_path(tensor_dir, data_name)
    if path is None:
        raise TensorReadError(reason)
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".npy":
        return _load_npy(path, data_name)
    if suffix == ".pt":
        return _load_pt(path, data_name)
    raise TensorReadError(f"tensor file {data_name} has an unsupported suffix (expected .npy or .pt).")


MMAP_ABOVE_BYTES = 64 * 1024 * 1024   # larger files are memory-mapped and streamed; smaller ones read at once


def _load_npy(path: str, data_name: str) -> np.ndarray:
    try:
        large = os.path.getsize(path) > MMAP_ABOVE_BYTES
        array = np.load(path, mmap_mode="r" if large else None, allow_pickle=False)
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


def _load_pt(path: str, data_name: str) -> np.ndarray:
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
