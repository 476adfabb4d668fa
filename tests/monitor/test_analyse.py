"""`msprobe monitor analyse` without a framework: on the CSVs the reference's monitor wrote (a planted fc1 x50 at
step 20), its anomaly.json, our anomaly files, ordering across ranks, the dump config, bad input."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from msprobe.monitor.analyse import analyse, dump_config, groups, load, to_json
from msprobe.monitor.layout import RunWriter
from msprobe.monitor.records import Anomaly

from conftest import FIXTURES, run_cli

REFERENCE = FIXTURES / "monitor" / "reference_lstm_wscale"


def anomaly(step, rank=0, stage="forward", call=0, micro=0, kind="spike", module="fc1", name="fc1.output",
            group="actv", op="norm") -> Anomaly:
    return Anomaly(kind=kind, rank=rank, step=step, micro_step=micro, stage=stage, call=call, module=module,
                   name=name, group=group, op=op, value=2.0, baseline=1.0, rule="AnomalyTurbulence")


def test_the_reference_csvs_read_again_name_the_planted_weight():
    analysis = load(str(REFERENCE), source="csv")
    first = analysis.first
    assert (first.step, first.rank, first.stage, first.module, first.name, first.metric, first.kind) == \
        (20, 0, "forward", "fc1", "fc1.weight", "param_origin.norm", "spike")
    # the value is the reference's own number (6 decimals); the baseline the median of the steps before
    assert first.value == pytest.approx(50 * first.baseline, rel=0.01)
    assert min(a.step for a in analysis.anomalies) == 20          # no false alarm in the 20 clean steps
    assert analysis.framework == "pytorch"


def test_auto_reads_the_csvs_of_a_reference_run_and_the_reference_file_on_request():
    assert load(str(REFERENCE)).first.step == 20                       # no anomaly.jsonl of ours: the CSVs
    with open(REFERENCE / "anomaly_detected" / "rank0" / "anomaly.json", encoding="utf-8") as handle:
        entries = json.load(handle)
    theirs = load(str(REFERENCE), source="reference")
    assert len(theirs.anomalies) == len(entries)
    # the reference's alerts: from step 1 on, rises only, the planted weight among many
    assert theirs.first.step == 1 and {a.kind for a in theirs.anomalies} == {"spike"}
    planted = [a for a in theirs.anomalies if a.step == 20 and a.name.startswith("fc1")]
    assert planted and theirs.anomalies.index(planted[0]) > 100


def test_cli_json_on_a_reference_run(tmp_path, capsys):
    assert run_cli(["monitor", "analyse", "-d", REFERENCE, "--json", "-o", tmp_path]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["first"]["step"] == 20 and result["first"]["module"] == "fc1"
    assert result["first"]["kind"] == "spike" and result["first"]["stage"] == "forward"
    assert result["anomalies"] == sum(g["count"] for g in result["groups"])
    config = json.loads((tmp_path / "dump_config.json").read_text())
    assert config["tensor"]["list"] == ["Module.fc1."] and config["step"] == [20] and config["rank"] == [0]
    assert json.loads((tmp_path / "analyse.json").read_text()) == result
    # the summary form
    assert run_cli(["monitor", "analyse", "-d", REFERENCE, "-o", tmp_path]) == 0
    out = capsys.readouterr().out
    assert "first (the origin): step 20, rank 0, forward, fc1 (fc1.weight)" in out
    assert "msprobe triage" in out and "MSPROBE_DUMP_CONFIG=" in out


def test_every_ranks_anomalies_in_the_order_they_happened():
    found = [anomaly(5, rank=1, stage="backward", call=3), anomaly(5, rank=0, stage="optimizer", call=0),
             anomaly(5, rank=1, stage="forward", call=40), anomaly(5, rank=0, stage="forward", call=41),
             anomaly(4, rank=1, stage="optimizer", call=9, micro=0), anomaly(5, rank=0, stage="forward", call=2,
                                                                              micro=1)]
    analysis = analyse(found)
    assert [(a.step, a.micro_step, a.stage, a.call, a.rank) for a in analysis.anomalies] == [
        (4, 0, "optimizer", 9, 1), (5, 0, "forward", 40, 1), (5, 0, "forward", 41, 0), (5, 0, "backward", 3, 1),
        (5, 0, "optimizer", 0, 0), (5, 1, "forward", 2, 0)]
    assert analysis.ranks == [0, 1]
    assert [(g["step"], g["count"], g["ranks"]) for g in groups(analysis)] == [(4, 1, [1]), (5, 5, [0, 1])]


def test_the_dump_config_is_the_collectors_format():
    config = dump_config(anomaly(7, rank=3, module="layers.2.mlp"), "pytorch", "./d")
    assert config == {"task": "tensor", "dump_path": "./d", "rank": [3], "step": [7], "level": "mix",
                      "async_dump": False,
                      "tensor": {"scope": [], "list": ["Module.layers.2.mlp."], "data_mode": ["all"]}}
    assert dump_config(anomaly(7, module="dense"), "mindspore")["tensor"]["list"] == ["Cell.dense."]
    assert dump_config(anomaly(7, module=""))["tensor"]["list"] == []         # the model's input: everything


def test_our_anomaly_files_are_read_first_and_golden_divergences_with_them(tmp_path):
    for rank, step in ((0, 9), (1, 8)):
        writer = RunWriter(str(tmp_path), rank, ("norm",))
        writer.write_anomalies([anomaly(step, rank=rank, kind="divergence" if rank else "spike")])
        writer.close()
    analysis = load(str(tmp_path))
    assert [(a.step, a.rank, a.kind) for a in analysis.anomalies] == [(8, 1, "divergence"), (9, 0, "spike")]
    result = to_json(analysis)
    assert result["first"]["kind"] == "divergence" and result["anomalies"] == 2


def test_no_anomaly_is_a_null_first(tmp_path, capsys):
    shutil.copytree(REFERENCE, tmp_path / "run")
    (tmp_path / "run" / "anomaly_detected" / "rank0" / "anomaly.json").unlink()
    assert run_cli(["monitor", "analyse", "-d", tmp_path / "run", "--json", "-o", tmp_path / "o", "-c",
                    FIXTURES / "monitor" / "reference_run_config.json", "--source", "anomalies"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["anomalies"] == 0 and result["first"] is None
    assert not (tmp_path / "o" / "dump_config.json").exists()


def test_values_that_are_not_finite_are_null_in_json():
    found = analyse([Anomaly(kind="nan", rank=0, step=3, micro_step=0, stage="forward", call=1, module="m",
                             name="m.output", group="actv", op="max", value=math.nan, baseline=None, rule="AnomalyNan")])
    text = json.dumps(to_json(found), allow_nan=False)
    assert json.loads(text)["first"]["value"] is None


@pytest.mark.parametrize("args, message", [
    (["-d", "/nonexistent/run"], "does not exist"),
    (["-d", str(FIXTURES / "monitor" / "reference_run_config.json")], "is a file"),
    (["-d", str(FIXTURES / "monitor" / "reference_lstm_wscale" / "anomaly_detected" / "rank0"), "--source", "csv"],
     "no rank folder of CSVs"),
])
def test_bad_input_is_one_error_line(tmp_path, capsys, args, message):
    assert run_cli(["monitor", "analyse", *args, "-o", tmp_path]) != 0
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_directory_with_no_monitor_output_is_named(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert run_cli(["monitor", "analyse", "-d", tmp_path / "empty", "-o", tmp_path / "o"]) == 1
    assert "holds no monitor output" in capsys.readouterr().err


def test_no_action_is_a_usage_error(capsys):
    assert run_cli(["monitor"]) == 2
    assert "needs an action" in capsys.readouterr().err
