"""Opening tensor files safely: .npy without pickle, .pt weights-only, hostile names refused."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from msprobe.dump.tensors import TensorReadError, load_tensor


def test_large_npy_files_are_memory_mapped_small_ones_read(tmp_path, monkeypatch):
    from msprobe.dump import tensors

    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    array = load_tensor(str(tmp_path), "a.npy")
    assert not isinstance(array, np.memmap) and array.shape == (2, 3) and float(array[1, 2]) == 5.0
    monkeypatch.setattr(tensors, "MMAP_ABOVE_BYTES", 10)
    assert isinstance(load_tensor(str(tmp_path), "a.npy"), np.memmap)


@pytest.mark.parametrize("name", ["../a.npy", "/etc/passwd", "sub/a.npy", "..", "", "a\\b.npy"])
def test_names_outside_the_tensor_dir_are_refused(tmp_path, name):
    with pytest.raises(TensorReadError, match="invalid data_name"):
        load_tensor(str(tmp_path), name)


def test_missing_truncated_pickled_symlinked_and_unknown_files(tmp_path):
    with pytest.raises(TensorReadError, match="not found"):
        load_tensor(str(tmp_path), "missing.npy")
    np.save(tmp_path / "full.npy", np.zeros(1000, np.float32))
    data = (tmp_path / "full.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(TensorReadError, match="not a readable .npy"):
        load_tensor(str(tmp_path), "cut.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(TensorReadError):
        load_tensor(str(tmp_path), "obj.npy")
    os.symlink(tmp_path / "full.npy", tmp_path / "link.npy")
    with pytest.raises(TensorReadError, match="symbolic link"):
        load_tensor(str(tmp_path), "link.npy")
    (tmp_path / "x.bin").write_bytes(b"1234")
    with pytest.raises(TensorReadError, match="unsupported suffix"):
        load_tensor(str(tmp_path), "x.bin")


def test_pt_files_with_torch(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    torch.save(torch.tensor([1.0, 2.5], dtype=torch.bfloat16), tmp_path / "b.pt")
    array = load_tensor(str(tmp_path), "b.pt")
    assert array.dtype == np.float32 and array.tolist() == [1.0, 2.5]
    (tmp_path / "bad.pt").write_bytes(b"not a zip")
    with pytest.raises(TensorReadError, match="could not be read by torch"):
        load_tensor(str(tmp_path), "bad.pt")
    torch.save({"not": "a tensor"}, tmp_path / "dict.pt")
    with pytest.raises(TensorReadError, match="does not hold a tensor"):
        load_tensor(str(tmp_path), "dict.pt")


def test_pt_files_without_torch_give_a_clear_message(tmp_path, monkeypatch):
    (tmp_path / "a.pt").write_bytes(b"whatever")
    monkeypatch.setitem(sys.modules, "torch", None)   # makes `import torch` raise ImportError
    with pytest.raises(TensorReadError, match="needs torch, which is not installed"):
        load_tensor(str(tmp_path), "a.pt")
