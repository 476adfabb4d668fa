"""Readers tolerate "dump_error" (what a collector could not record) anywhere: flatten skips it and keeps a note per
row, compare says so in that row's Err_message, graph builds the dump, acc_check skips the API with the reason.
The dump is the real refdata TinyGPT L1 dump with dump_error put at every level, including the one the collector
used to write inside a parameters_grad body (which made compare and graph refuse the whole dump)."""

from __future__ import annotations

import json

import pytest

from msprobe.dump.flatten import flatten

from conftest import FIXTURES, only_file, read_csv, run_cli

L1 = FIXTURES / "stats_L1_step0" / "target" / "dump.json"
MIX = FIXTURES / "stats_mix_step0" / "target"


def damaged(path) -> dict:
    dump = json.loads(path.read_text())
    data = dump["data"]
    data["Functional.linear.0.forward"]["dump_error"] = "stack: RuntimeError: no frame"            # entry level
    data["Functional.linear.1.forward"]["input_args"][0]["dump_error"] = "statistics: TypeError: x"  # one record
    data["Functional.linear.1.forward"]["input_args"][0].update(Max=None, Min=None, Mean=None, Norm=None)
    data["Functional.linear.2.forward"]["input_kwargs"] = {"dump_error": "input: ValueError: y"}    # a section
    grads = [name for name in data if ".parameters_grad." in name]
    if grads:
        data[grads[0]]["dump_error"] = "parameters_grad: RuntimeError: z"     # the previous collector's place
    return dump


def test_flatten_skips_it_and_keeps_a_note_per_row():
    data = damaged(L1)["data"]
    items = flatten(data)
    clean = flatten(json.loads(L1.read_text())["data"])
    assert items.name == clean.name                                       # no row added, none lost
    notes = {items.name[i]: text for i, text in items.notes.items()}
    assert notes["Functional.linear.0.forward.input.0"] == "stack: RuntimeError: no frame"
    assert notes["Functional.linear.0.forward.output.0"] == "stack: RuntimeError: no frame"
    assert notes["Functional.linear.1.forward.input.0"] == "statistics: TypeError: x"
    assert "Functional.linear.1.forward.input.1" not in notes
    assert notes["Functional.linear.2.forward.input.0"] == "input: ValueError: y"
    assert not clean.notes


@pytest.mark.parametrize("mode", ["statistics", "md5"])
def test_compare_names_it_in_the_row(tmp_path, mode):
    source = L1 if mode == "statistics" else FIXTURES / "md5_mix_step0" / "target" / "dump.json"
    target = tmp_path / "target" / "dump.json"
    target.parent.mkdir()
    target.write_text(json.dumps(damaged(source)))
    assert run_cli(["compare", "-tp", target, "-gp", source, "-o", tmp_path / "out", "--csv"]) == 0
    rows = read_csv(only_file(tmp_path / "out", "compare_result_*.csv"))
    header = rows[0]
    by_name = {row[0]: row for row in rows[1:]}
    message = by_name["Functional.linear.1.forward.input.0"][header.index("Err_message")]
    assert "warning: NPU data not fully dumped: statistics: TypeError: x" in message
    assert by_name["Functional.linear.1.forward.input.0"][header.index("Result")] == "warning"
    assert "not fully dumped" not in by_name["Functional.linear.1.forward.input.1"][header.index("Err_message")]


def test_compare_and_graph_read_an_old_parameters_grad_dump_error(tmp_path):
    directory = tmp_path / "mix"
    directory.mkdir()
    for name in ("stack.json", "construct.json"):
        (directory / name).write_bytes((MIX / name).read_bytes())
    (directory / "dump.json").write_text(json.dumps(damaged(MIX / "dump.json")))
    assert run_cli(["compare", "-tp", directory / "dump.json", "-gp", MIX / "dump.json", "-o", tmp_path / "cmp",
                    "--csv"]) == 0
    assert run_cli(["graph", "-tp", directory, "-o", tmp_path / "graph"]) == 0


def test_an_incomplete_step_is_said(tmp_path, msprobe_records):
    dump = json.loads(L1.read_text())
    dump["incomplete"] = "the step raised AssertionError: loss is nan"
    target = tmp_path / "dump.json"
    target.write_text(json.dumps(dump))
    assert run_cli(["compare", "-tp", target, "-gp", L1, "-o", tmp_path / "out", "--csv"]) == 0
    said = [r.getMessage() for r in msprobe_records if "did not finish" in r.getMessage()]
    assert len(said) == 1 and "loss is nan" in said[0]


def test_acc_check_skips_the_api_with_the_reason(tmp_path):
    pytest.importorskip("torch", reason="acc_check of a PyTorch dump needs torch")
    dump = damaged(L1)
    names = list(dump["data"])
    keep = [n for n in names if n.startswith(("Functional.linear.0.", "Functional.linear.1.", "Functional.linear.3."))]
    dump["data"] = {n: dump["data"][n] for n in keep}
    api_info = tmp_path / "dump.json"
    api_info.write_text(json.dumps(dump))
    assert run_cli(["acc_check", "-api_info", api_info, "-o", tmp_path / "out"]) == 0
    rows = {row[0]: row for row in read_csv(only_file(tmp_path / "out", "accuracy_checking_result_*.csv"))[1:]}
    assert rows["Functional.linear.0"][1] == "SKIP" and "not fully dumped (stack: RuntimeError" in rows[
        "Functional.linear.0"][-1]
    assert rows["Functional.linear.1"][1] == "SKIP" and "statistics: TypeError: x" in rows["Functional.linear.1"][-1]
    assert rows["Functional.linear.3"][1] == "pass"
