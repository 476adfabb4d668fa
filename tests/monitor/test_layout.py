"""The monitor's files: the reference's layout and columns, append-only windows, reading runs back one step at a
time (ours and the reference's), the anomaly files."""

from __future__ import annotations

import csv
import json
import os
import re

import numpy as np
import pytest

from msprobe.monitor.layout import (
    RunWriter,
    folder_name,
    read_anomalies,
    read_run,
    run_folders,
    window,
    write_reference_anomalies,
)
from msprobe.monitor.records import Anomaly, StepRecords

from conftest import FIXTURES

REFERENCE_RUN = FIXTURES / "monitor" / "reference_run"


def make_records(step: int, rank: int = 0, ops=("min", "max", "mean", "norm", "zeros", "nans")) -> StepRecords:
    rows = [("actv", "fc1.input", "fc1", "forward", 0), ("actv", "fc1.output", "fc1", "forward", 0),
            ("actv_grad", "fc1.input", "fc1", "backward", 0), ("actv_grad", "fc1.output", "fc1", "backward", 0),
            ("grad_unreduced", "fc1.weight", "fc1", "backward", 0), ("grad_reduced", "fc1.weight", "fc1", "optimizer", 0),
            ("loss", "loss", "", "forward", 0)]
    values = np.arange(len(rows) * len(ops), dtype=float).reshape(len(rows), len(ops)) / 7 + step
    if "nans" in ops:
        values[:, ops.index("nans")] = np.arange(len(rows))     # a count
    values[2] = np.nan
    present = np.ones(len(rows), dtype=bool)
    present[2] = False
    return StepRecords(rank=rank, step=step, ops=tuple(ops), group=[r[0] for r in rows], name=[r[1] for r in rows],
                       module=[r[2] for r in rows], stage=[r[3] for r in rows], micro_step=[r[4] for r in rows],
                       call=list(range(len(rows))), vpp_stage=[0] * len(rows),
                       shape=[(2, 3), (2, 4), None, (2, 4), (4, 3), (4, 3), ()],
                       dtype=["torch.float32"] * 2 + [None] + ["torch.float32"] * 4, values=values, present=present)


def test_folder_name_is_the_reference_pattern():
    assert re.fullmatch(r"[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}-rank3-[0-9a-f]{8}", folder_name(3))
    assert window(7, 1) == (7, 7) and window(7, 5) == (5, 9) and window(0, 3) == (0, 2)


def test_written_csv_has_the_reference_columns_and_reads_back(tmp_path):
    writer = RunWriter(str(tmp_path), rank=0, ops=("norm", "min", "max", "mean", "zeros", "nans"), ndigits=4)
    for step in range(3):
        writer.write(make_records(step))
    writer.close()
    folder = writer.directory
    assert sorted(os.listdir(folder))[:3] == ["actv_0-0.csv", "actv_1-1.csv", "actv_2-2.csv"]
    with open(os.path.join(folder, "actv_grad_1-1.csv"), newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["vpp_stage", "name", "step", "micro_step", "norm", "min", "max", "mean", "zeros", "nans",
                       "shape", "dtype", "module", "call"]
    assert rows[1] == ["0", "fc1.input", "1", "0", "", "", "", "", "", "", "", "", "fc1", "2"]      # absent
    with open(os.path.join(folder, "grad_reduced_2-2.csv"), newline="") as handle:
        head = next(csv.reader(handle))
    assert head[:4] == ["vpp_stage", "name", "step", "norm"]               # no micro_step column
    steps = list(read_run(str(tmp_path))[0])
    assert [s.step for s in steps] == [0, 1, 2]
    expected = make_records(1)
    got = steps[1]
    assert got.group == expected.group and got.name == expected.name and got.module == expected.module
    assert got.stage == expected.stage and got.call == expected.call and got.ops == expected.ops
    assert list(got.present) == list(expected.present) and got.shape == expected.shape
    assert np.allclose(got.values[got.present], np.round(expected.values[expected.present], 4), atol=1e-12)
    assert np.isnan(got.values[2]).all()


def test_windows_of_several_steps_are_appended(tmp_path):
    writer = RunWriter(str(tmp_path), rank=1, ops=("norm",), step_count_per_record=3)
    for step in (0, 2, 4, 6):
        writer.write(make_records(step, rank=1, ops=("norm",)))
    writer.close()
    assert sorted(f for f in os.listdir(writer.directory) if f.startswith("grad_reduced")) == \
        ["grad_reduced_0-2.csv", "grad_reduced_3-5.csv", "grad_reduced_6-8.csv"]
    with open(os.path.join(writer.directory, "grad_reduced_0-2.csv")) as handle:
        assert [line.split(",")[2] for line in handle.read().splitlines()[1:]] == ["0", "2"]
    assert [s.step for s in read_run(str(tmp_path))[1]] == [0, 2, 4, 6]


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path):
    writer = RunWriter(str(tmp_path), rank=0, ops=("norm",), step_count_per_record=10)
    writer.write(make_records(0, ops=("norm",)))
    writer.write(make_records(1, ops=("norm",)))
    writer.close()
    path = os.path.join(writer.directory, "actv_0-9.csv")
    with open(path) as handle:
        text = handle.read()
    with open(path, "w") as handle:
        handle.write(text[:-7])
    steps = list(read_run(writer.directory)[0])
    assert [len([g for g in s.group if g == "actv"]) for s in steps] == [2, 1]


def test_a_resumed_run_is_one_run_and_the_later_folder_wins(tmp_path):
    first = RunWriter(str(tmp_path), rank=0, ops=("norm",))
    for step in range(3):
        first.write(make_records(step, ops=("norm",)))
    first.close()
    os.rename(first.directory, os.path.join(tmp_path, "Jan01_00-00-00-rank0-00000000"))
    second = RunWriter(str(tmp_path), rank=0, ops=("norm",))
    for step in range(2, 4):
        second.write(make_records(step + 100, ops=("norm",)))
    second.close()
    assert len(run_folders(str(tmp_path))[0]) == 2
    assert [s.step for s in read_run(str(tmp_path))[0]] == [0, 1, 2, 102, 103]


def test_reference_files_are_read():
    runs = read_run(str(REFERENCE_RUN))
    steps = list(runs[0])
    assert [s.step for s in steps] == [0, 1, 2]
    first = steps[0]
    assert first.ops == ("min", "max", "mean", "norm", "zeros", "nans")
    rows = {(g, n): i for i, (g, n) in enumerate(zip(first.group, first.name))}
    absent = rows[("actv_grad", "two.input")]
    assert not first.present[absent] and first.shape[absent] is None
    fc = rows[("actv", "shared.output")]
    assert first.present[fc] and first.shape[fc] == (3, 4) and first.module[fc] == "shared"
    assert first.module[rows[("grad_reduced", "two.a.weight")]] == "two.a"
    # order: param_origin, forward, backward, optimizer groups
    stages = first.stage
    assert stages.index("backward") > max(i for i, s in enumerate(stages) if s == "forward")
    assert first.group[0] == "param_origin"


def test_anomalies_are_appended_and_read_in_order(tmp_path):
    writer = RunWriter(str(tmp_path), rank=1, ops=("norm",), reference_anomalies=True)
    late = Anomaly("spike", 1, 5, 0, "backward", 3, "fc1", "fc1.input", "actv_grad", "norm", 9.0, 1.0,
                   "AnomalyTurbulence")
    early = Anomaly("nan", 1, 5, 0, "forward", 7, "fc2", "fc2.output", "actv", "nans", 1.0, None, "AnomalyNan")
    writer.write_anomalies([late])
    writer.write_anomalies([early])
    writer.close()
    other = RunWriter(str(tmp_path), rank=0, ops=("norm",))
    first = Anomaly("drop", 0, 4, 0, "optimizer", 1, "fc1", "fc1.weight", "grad_reduced", "norm", 0.1, 1.0,
                    "AnomalyTurbulence")
    other.write_anomalies([first])
    other.close()
    assert read_anomalies(str(tmp_path)) == [first, early, late]
    assert read_anomalies(os.path.join(tmp_path, "anomaly_detected", "rank1")) == [early, late]
    with open(os.path.join(tmp_path, "anomaly_detected", "rank1", "anomaly.jsonl"), "a") as handle:
        handle.write('{"kind": "nan", "ra')           # cut short
    assert len(read_anomalies(str(tmp_path))) == 3
    reference = json.load(open(os.path.join(tmp_path, "anomaly_detected", "rank1", "anomaly.json")))
    assert set(reference) == {"0:fc2.output:0/rank1/actv_step_5_call_7", "0:fc1.input:0/rank1/actv_grad_step_5_call_3"}
    assert reference["0:fc2.output:0/rank1/actv_step_5_call_7"]["call_id"] == 7


def test_reference_anomaly_file_is_rewritten_once_from_the_log(tmp_path):
    folder = tmp_path / "rank0"
    folder.mkdir()
    write_reference_anomalies(str(folder))             # nothing to write
    assert not (folder / "anomaly.json").exists()


@pytest.mark.parametrize("name", ["a,b", 'quote"d', "new\nline", "x.output_0"])
def test_names_are_data(tmp_path, name):
    records = make_records(0, ops=("norm",))
    records.name[0] = name
    writer = RunWriter(str(tmp_path), rank=0, ops=("norm",))
    writer.write(records)
    writer.close()
    assert next(iter(read_run(str(tmp_path))[0])).name[0] == name
