"""Opening tensor files safely: .npy without pickle, .pt weights-only, hostile names refused."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from msprobe.dump.tensors import TensorReadError, load_tensor


def _mapped(array: np.ndarray) -> bool:
    """Whether the array's memory is a memory map of a file."""
    import mmap

    base = array
    while base is not None and not isinstance(base, (mmap.mmap, np.memmap)):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base is not None


def test_large_npy_files_are_memory_mapped_small_ones_read(tmp_path, monkeypatch):
    from msprobe.dump import tensors

    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    array = load_tensor(str(tmp_path), "a.npy")
    assert not _mapped(array) and array.shape == (2, 3) and float(array[1, 2]) == 5.0
    monkeypatch.setattr(tensors, "MMAP_ABOVE_BYTES", 10)
    array = load_tensor(str(tmp_path), "a.npy")
    assert _mapped(array) and array.shape == (2, 3) and float(array[1, 2]) == 5.0
    assert not array.flags.writeable      # the file is never written through the map


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


# ---- the reader of our own: .pt files without torch, .npy headers without literal_eval --------------------------

def _torch_values(torch, tensor):
    """What torch itself makes of a tensor as numpy (bfloat16 and float8 as float32)."""
    tensor = tensor.detach()
    if tensor.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        tensor = tensor.float()
    return tensor.numpy()


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes in C order (NaN payloads included)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


def _zoo(torch) -> dict:
    """Tensors of every storage type the reader knows, odd shapes and saved views (offset, strides)."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(5, 7, 3, generator=gen)
    base[0, 0, 0], base[1, 2, 1], base[4, 6, 2] = float("nan"), float("inf"), float("-inf")
    zoo = {f"f32_{i}": t for i, t in enumerate((base, base[0, 0, 0], torch.zeros(0, 3), torch.ones(1),
                                                torch.randn(1, 1, 1, generator=gen)))}
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
                  torch.uint8, torch.bool, torch.complex64, torch.complex128):
        zoo[str(dtype)] = (base * 10).to(dtype) if not dtype.is_complex else torch.complex(base, -base).to(dtype)
    # views saved with their storage (torch.save keeps the whole storage, an offset and the strides)
    zoo["transposed"] = base.transpose(0, 2)
    zoo["sliced"] = base[1:4, ::2, 1]
    zoo["expanded"] = torch.arange(3.0).expand(4, 3)
    zoo["bf16_view"] = base.to(torch.bfloat16)[:, 3:, :].permute(2, 0, 1)
    zoo["scalar_int"] = torch.tensor(7)
    # views sharing one large storage: the last elements, a strided view of a view
    storage = torch.arange(4096.0)
    zoo["shared_tail"] = storage[-3:]
    zoo["shared_strided"] = storage.view(64, 64)[10:20:3, 5:50:7].t()
    return zoo


def test_pt_reader_gives_torch_s_own_values_for_every_plain_tensor(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    from msprobe.dump import tensors

    zoo = _zoo(torch)
    for name, tensor in zoo.items():
        torch.save(tensor, tmp_path / f"{name}.pt")
    for mmap_above in (tensors.MMAP_ABOVE_BYTES, 0):      # read, then memory-mapped
        monkeypatch.setattr(tensors, "MMAP_ABOVE_BYTES", mmap_above)
        for name, tensor in zoo.items():
            data = tensors._read_plain_pt(str(tmp_path / f"{name}.pt"))   # not torch's loader
            assert data is not None, name
            assert data.bfloat16 == (tensor.dtype == torch.bfloat16), name
            assert _same(data.widened(), _torch_values(torch, tensor)), name
            assert _same(load_tensor(str(tmp_path), f"{name}.pt"), _torch_values(torch, tensor)), name


def test_pt_reader_leaves_other_files_to_torch(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    from msprobe.dump import tensors

    cases = {"uint16": torch.tensor([1, 2, 60000], dtype=torch.uint16), "float8": torch.randn(4).to(torch.float8_e4m3fn),
             "parameter": torch.nn.Parameter(torch.randn(3))}
    for name, tensor in cases.items():
        torch.save(tensor, tmp_path / f"{name}.pt")
    torch.save(torch.randn(2, 3), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    cases["legacy"] = torch.load(tmp_path / "legacy.pt", weights_only=True)
    for name, tensor in cases.items():
        # not a plain tensor of a known storage in the zip format: the reader declines ...
        assert tensors._read_plain_pt(str(tmp_path / f"{name}.pt")) is None, name
        # ... and torch reads it
        assert _same(load_tensor(str(tmp_path), f"{name}.pt"), _torch_values(torch, tensor)), name


def test_pt_reader_runs_no_code_and_refuses_what_torch_refuses(tmp_path):
    """A pickle naming any other global (here os.system) is never unpickled by the reader; torch's weights-only
    loader then refuses it. Storages that are shorter than their tensor, or a tensor reaching past its storage,
    are refused too."""
    import pickle
    import zipfile

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(Evil(), protocol=2))
        archive.writestr("archive/byteorder", "little")
    with pytest.raises(TensorReadError):
        load_tensor(str(tmp_path), "evil.pt")
    assert not marker.exists()

    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    torch.save(torch.arange(100, dtype=torch.float32), tmp_path / "full.pt")
    with zipfile.ZipFile(tmp_path / "full.pt") as source, zipfile.ZipFile(tmp_path / "short.pt", "w") as target:
        for info in source.infolist():
            data = source.read(info)
            target.writestr(info.filename, data[:40] if info.filename.endswith("/data/0") else data)
    with pytest.raises(TensorReadError, match="could not be read by torch"):
        load_tensor(str(tmp_path), "short.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "full.pt").read_bytes()[:300])
    with pytest.raises(TensorReadError, match="could not be read by torch"):
        load_tensor(str(tmp_path), "cut.pt")


def _zip64_copy(source, target) -> None:
    """The members of a zip file written again as a zip64 archive (zip64 member records and end records)."""
    import zipfile

    with zipfile.ZipFile(source) as old, pytest.MonkeyPatch.context() as patch:
        patch.setattr(zipfile, "ZIP64_LIMIT", 16)     # every offset and size past 16 bytes takes zip64 records
        with zipfile.ZipFile(target, "w") as new:
            for info in old.infolist():
                with new.open(info.filename, "w", force_zip64=True) as member:
                    member.write(old.read(info))
    with open(target, "rb") as handle:
        assert b"PK\x06\x06" in handle.read()       # a zip64 end of central directory record


def test_pt_reader_reads_zip64_archives(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    from msprobe.dump import tensors

    for name, tensor in {"bf16": torch.randn(5, 7).to(torch.bfloat16), "view": torch.arange(50.0)[7::3]}.items():
        torch.save(tensor, tmp_path / f"{name}.pt")
        _zip64_copy(tmp_path / f"{name}.pt", tmp_path / f"{name}64.pt")
        data = tensors._read_plain_pt(str(tmp_path / f"{name}64.pt"))
        assert data is not None and _same(data.widened(), _torch_values(torch, tensor)), name


def test_damaged_pt_files_give_one_error_line_or_torch_s_values(tmp_path):
    """Every truncation and every 11th byte flipped of a .pt file: a TensorReadError of one line naming the file,
    never another exception; or values: torch's own (a flipped value of the tensor's data), or the undamaged
    values where torch refuses a member msprobe never reads (.format_version)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    from msprobe.dump import tensors

    original = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    torch.save(original, tmp_path / "good.pt")
    good = (tmp_path / "good.pt").read_bytes()
    damaged = {f"cut{n}": good[:n] for n in range(0, len(good), 37)}
    damaged.update({f"flip{n}": good[:n] + bytes([good[n] ^ 0xFF]) + good[n + 1:] for n in range(0, len(good), 11)})
    outcomes = set()
    for name, content in damaged.items():
        (tmp_path / f"{name}.pt").write_bytes(content)
        try:
            data = tensors.read_tensor(str(tmp_path), f"{name}.pt")
        except TensorReadError as exc:
            assert "\n" not in str(exc) and f"{name}.pt" in str(exc), name
            outcomes.add("refused")
            continue
        try:
            expected = torch.load(tmp_path / f"{name}.pt", weights_only=True)
        except Exception:  # noqa: BLE001 - torch refuses a file for a damaged member msprobe does not read
            expected = original
        assert _same(data.widened(), _torch_values(torch, expected)), name
        outcomes.add("read")
    assert outcomes == {"refused", "read"}


def test_plain_pt_files_are_read_without_torch(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    expected = torch.tensor([[1.0, -2.5], [3.0, 0.0]], dtype=torch.bfloat16)
    torch.save(expected, tmp_path / "b.pt")
    torch.save({"not": "a tensor"}, tmp_path / "dict.pt")
    monkeypatch.setitem(sys.modules, "torch", None)
    array = load_tensor(str(tmp_path), "b.pt")
    assert array.dtype == np.float32 and array.tolist() == [[1.0, -2.5], [3.0, 0.0]]
    with pytest.raises(TensorReadError, match="needs torch, which is not installed"):
        load_tensor(str(tmp_path), "dict.pt")


@pytest.mark.parametrize("array", [np.arange(12, dtype=np.float32).reshape(3, 4), np.float64(2.5),
                                   np.zeros((0, 5), np.int16), np.array([True, False]), np.arange(7, dtype=np.uint8),
                                   np.array([1 + 2j, 3 - 1j], np.complex64), np.arange(6.0).reshape(2, 3).T,
                                   np.arange(4, dtype=">f4"), np.arange(5, dtype=np.int64)],
                         ids=["2d", "0d", "empty", "bool", "uint8", "complex", "fortran", "big_endian", "int64"])
@pytest.mark.parametrize("mapped", [False, True])
def test_npy_files_read_as_numpy_reads_them(tmp_path, monkeypatch, array, mapped):
    from msprobe.dump import tensors

    np.save(tmp_path / "a.npy", array)
    if mapped:
        monkeypatch.setattr(tensors, "MMAP_ABOVE_BYTES", 0)
    loaded = load_tensor(str(tmp_path), "a.npy")
    expected = np.load(tmp_path / "a.npy")
    assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
    assert np.array_equal(loaded, expected)


def test_npy_version_2_header_and_padding(tmp_path):
    array = np.arange(10, dtype=np.float32)
    with open(tmp_path / "v2.npy", "wb") as handle:
        np.lib.format.write_array(handle, array, version=(2, 0))
    assert np.array_equal(load_tensor(str(tmp_path), "v2.npy"), array)
