"""Tensor mode reads PyTorch's .pt files itself: the same table as through torch.load, and no torch needed."""

from __future__ import annotations

import sys
import tarfile

import pytest

from conftest import FIXTURES, only_file, read_csv, run_cli


def _tensor_mix(base) -> list:
    """The reference's tensor-mode dump pair of tests/fixtures (.pt files of bfloat16, float32, int64 and bool
    tensors), extracted without torch."""
    paths = []
    for side in ("target", "golden"):
        with tarfile.open(FIXTURES / "tensor_mix_step0" / f"{side}.tar.gz") as archive:
            archive.extractall(base, filter="data")
        (proc,) = [p for p in (base / side / "step0").iterdir() if p.is_dir()]
        paths.append(proc / "dump.json")
    return paths


def _table(target, golden, out) -> list:
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv", "-c"]) == 0
    return read_csv(only_file(out, "compare_result_*.csv"))


def test_pt_files_compare_without_torch(tmp_path, monkeypatch):
    """The reference's .pt files are read by msprobe itself (test_conformance checks the table they give against
    the reference's own)."""
    target, golden = _tensor_mix(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)      # `import torch` fails: every file is read by msprobe
    table = _table(target, golden, tmp_path / "ours")
    header = table[0]
    assert len(table) == 1351
    assert not any("could not be read" in row[header.index("Err_message")] for row in table[1:])
    assert sum(row[header.index("Cosine")] not in ("unsupported", "N/A") for row in table[1:]) > 900


def test_reference_pt_files_hold_what_torch_reads(tmp_path):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
    from msprobe.dump.tensors import read_tensor

    _tensor_mix(tmp_path)
    files = sorted(tmp_path.glob("*/step0/*/dump_tensor_data/*.pt"))
    dtypes, kinds = set(), set()
    for index, path in enumerate(files):      # every bfloat16 file, the first of each dtype, every 25th
        data = read_tensor(str(path.parent), path.name)
        kind = (data.array.dtype, data.bfloat16)
        if index % 25 and not data.bfloat16 and kind in kinds:
            continue
        kinds.add(kind)
        tensor = torch.load(path, weights_only=True)
        dtypes.add(tensor.dtype)
        expected = (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).numpy()
        got = data.widened()
        assert got.dtype == expected.dtype and got.shape == expected.shape and got.tobytes() == expected.tobytes()
    assert {torch.bfloat16, torch.float32, torch.int64} <= dtypes
