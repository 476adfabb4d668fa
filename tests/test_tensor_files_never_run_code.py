"""A tensor file is data: a .pt file that would run code when unpickled is refused, quietly, by every reader."""

from __future__ import annotations

import pytest
from helpers_bad_input import (
    ENTRY,
    assert_outputs,
    assert_success,
    read_csv_rows,
    run_inproc,
    write_json,
)


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _pt_side(side_dir, save):
    """A PyTorch tensor-mode dump of ENTRY whose three .pt files are written by save(path)."""
    tensor_dir = side_dir / "dump_tensor_data"
    tensor_dir.mkdir(parents=True)
    records = {}
    for section, count in (("input", 2), ("output", 1)):
        records[section] = []
        for index in range(count):
            name = f"{ENTRY}.{section}.{index}.pt"
            save(tensor_dir / name)
            records[section].append({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0,
                                     "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False,
                                     "data_name": name})
    content = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": None,
               "data": {ENTRY: {"input_args": records["input"], "input_kwargs": {}, "output": records["output"]}}}
    return write_json(side_dir / "dump.json", content)


@pytest.mark.usefixtures("fresh_logger")
@pytest.mark.parametrize("form", ["plain-pickle", "torch-save"])
def test_a_pt_file_that_would_run_code_is_refused_quietly(tmp_path, capsys, form):
    """torch.load(weights_only=True) refuses the pickle; torch's text advised weights_only=False (which runs the
    code) and a plain pickle put a two-line UserWarning on stderr. The row now says the file is refused and why,
    and stderr stays empty."""
    import pickle

    torch = pytest.importorskip("torch")
    marker = tmp_path / "code-ran"

    def hostile(path):
        if form == "plain-pickle":
            with open(path, "wb") as handle:
                pickle.dump(_RunsCode(str(marker)), handle, protocol=4)
        else:
            torch.save({"x": _RunsCode(str(marker))}, path)

    tp = _pt_side(tmp_path / "t", hostile)
    gp = _pt_side(tmp_path / "g", lambda path: torch.save(torch.ones(4), path))
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", tmp_path / "out", "--csv"], capsys)
    assert_success(run)
    assert not marker.exists()
    rows = read_csv_rows(assert_outputs(tmp_path / "out", "csv"))
    assert len(rows) == 3
    for row in rows:
        assert "objects other than tensors, which are never unpickled: that could run code); refused" in \
            row["Err_message"]
        assert "weights_only" not in row["Err_message"]
