"""Optional full-refdata check: the real L2 kernel dump (1178 .npy files) with both real IRs against the reference
outputs. Runs only when MSPROBE_REFDATA names the refdata root (it reads $MSPROBE_REFDATA/mindspore/graph/)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from conftest import only_file, read_csv, run_cli

REFDATA = os.environ.get("MSPROBE_REFDATA")
pytestmark = pytest.mark.skipif(not REFDATA, reason="set MSPROBE_REFDATA to the refdata root to run")


@pytest.fixture(scope="module")
def kernel_dump(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("l2_tensor")
    with tarfile.open(Path(REFDATA) / "mindspore" / "graph" / "l2_tensor.tar.gz") as archive:
        archive.extractall(base, filter="data")
    return base / "l2_tensor" / "dump" / "rank_0"


def rows_by_name(path) -> dict:
    rows = read_csv(path)
    assert rows[0] == ["File Path", "Code Stack", "Scope Name"]
    return {os.path.basename(row[0]): (row[1], row[2]) for row in rows[1:]}


@pytest.mark.parametrize("ir, reference", [
    ("graph_build", "code_mapping_graph_build.code_mapping_*.csv.gz"),
    ("trace_code", "code_mapping_trace_code.code_mapping_*.csv.gz"),
])
def test_full_refdata(kernel_dump, tmp_path, ir, reference):
    graph = Path(REFDATA) / "mindspore" / "graph"
    ir_path = (graph / "graph_build_0_0094.ir.gz" if ir == "graph_build"
               else kernel_dump / "graphs" / "ms_output_trace_code_graph_0.ir")
    data = kernel_dump / "Net" / "0" / "0"
    assert run_cli(["code_mapping", "--ir", ir_path, "--dump_data", data, "--output", tmp_path]) == 0
    ours = rows_by_name(only_file(tmp_path, "code_mapping_*.csv"))
    expected = rows_by_name(only_file(graph, reference))
    assert len(expected) == len(ours) == 1178
    # No documented difference applies to this dump (see test_code_mapping.py): every row is identical.
    assert [name for name in expected if ours.get(name) != expected[name]] == []
    ours_paths = [row[0] for row in read_csv(only_file(tmp_path, "code_mapping_*.csv"))[1:]]
    assert all(path.startswith(os.path.realpath(data) + os.sep) for path in ours_paths)
