"""Numbers no parser expected (issue 28 and later rounds): a JSON integer beyond the float range, or of thousands of
digits, is an infinity to every command (compare, graph, the Python API), never a crash."""

from __future__ import annotations

import json
import shutil

import helpers_bad_input
import pytest
from helpers_bad_input import (
    assert_outputs,
    assert_success,
    read_csv_rows,
    run_inproc,
    stats_dump,
    write_json,
)

from conftest import FIXTURES

ENTRY = "Functional.linear.2.forward"


def _perturbed_mix(tmp_path, **output_stats):
    """stats_mix_step0 with the statistics of ENTRY's first output replaced; a value "BIG" becomes a JSON
    integer of 401 digits, beyond the float range."""
    for side in ("target", "golden"):
        shutil.copytree(FIXTURES / "stats_mix_step0" / side, tmp_path / side)
    path = tmp_path / "target" / "dump.json"
    content = json.loads(path.read_text())
    content["data"][ENTRY]["output"][0].update(output_stats)
    path.write_text(json.dumps(content).replace('"BIG"', "1" + "0" * 400))
    return tmp_path / "target", tmp_path / "golden"


@pytest.mark.parametrize("extra", [["--csv"], ["--html"], ["-da"]])
def test_a_json_integer_beyond_the_float_range_is_an_infinity(tmp_path, capsys, extra):
    target, golden = _perturbed_mix(tmp_path, Max="BIG", Min="Infinity", Mean="-1e999")
    run = run_inproc(["compare", "-tp", target / "dump.json", "-gp", golden / "dump.json", "-o", tmp_path / "o",
                      *extra], capsys)
    assert_success(run)
    if extra == ["--csv"]:
        import csv

        with open(next((tmp_path / "o").glob("compare_result_*.csv")), encoding="utf-8") as handle:
            row = next(r for r in csv.DictReader(handle) if r["NPU Name"] == f"{ENTRY}.output.0")
        assert row["Max diff"] == "inf" and row["Min diff"] == "inf" and row["Mean diff"] == "-inf"
        assert row["Result"] == "error" and "nan/inf/-inf" in row["Err_message"]


@pytest.mark.parametrize("fmt", ["json", "db"])
def test_graph_of_an_integer_beyond_the_float_range(tmp_path, capsys, fmt):
    target, golden = _perturbed_mix(tmp_path, Max="BIG")
    run = run_inproc(["graph", "-tp", target, "-gp", golden, "-o", tmp_path / "o", "--format", fmt, "-j", "1"],
                     capsys)
    assert_success(run)


def test_api_frame_of_an_integer_beyond_the_float_range(tmp_path):
    pytest.importorskip("pandas")
    import msprobe

    target, golden = _perturbed_mix(tmp_path, Max="BIG")
    frame = msprobe.compare(str(target / "dump.json"), str(golden / "dump.json")).to_pandas()
    row = frame[frame["NPU Name"] == f"{ENTRY}.output.0"].iloc[0]
    assert row["NPU max"] == float("inf") and row["Max diff"] == float("inf")


# ------------------------------------------------------------------------------------------ same-second runs


# ------------------------------------------------------------------------------------------ daemonic processes




@pytest.mark.usefixtures("fresh_logger")
@pytest.mark.parametrize("key, raw", [("Max", "1" + "0" * 5000), ("Max", "-1" + "0" * 5000),
                                      ("shape", "[1" + "0" * 5000 + "]")], ids=["max", "negative-max", "shape"])
def test_an_integer_of_thousands_of_digits_is_an_infinity(tmp_path, capsys, key, raw):
    """Python refuses to convert an integer of more than 4300 digits ("Exceeds the limit"): that was an internal
    error (exit 3). Such an integer is far beyond the float range, and is read as the infinity of its sign, as
    every integer beyond the float range is (docs/security.md, Numbers)."""
    target = stats_dump()
    target["data"][helpers_bad_input.ENTRY]["input_args"][0][key] = "@@"
    tp = tmp_path / "t" / "dump.json"
    tp.parent.mkdir()
    tp.write_text(json.dumps(target).replace('"@@"', raw))
    gp = write_json(tmp_path / "g" / "dump.json", stats_dump())
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", tmp_path / "out", "--csv"], capsys)
    assert_success(run)
    row = read_csv_rows(assert_outputs(tmp_path / "out", "csv"))[0]
    if key == "Max":
        assert row["NPU max"].strip() == ("inf" if raw[0] == "1" else "-inf")
        assert "nan/inf" in row["Err_message"]
    else:
        assert row["NPU Tensor Shape"] == "[inf]" and "shape" in row["Err_message"]
