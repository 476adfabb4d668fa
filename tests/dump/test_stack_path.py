"""Where NPU_Stack_Info comes from (spec compare.md §1.3): the 1.x compare.json's `stack_path` with `-s`, the
stack.json beside the target otherwise; `-s` without any stack file is an error; `stack_path` without `-s` means
no stack."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES, only_file, read_csv, run_cli

CASE = FIXTURES / "stats_L1_step0"


@pytest.fixture()
def bare_target(tmp_path):
    """The target dump.json without a stack.json beside it, and its stack.json moved elsewhere."""
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(CASE / "target" / "dump.json", target)
    elsewhere = tmp_path / "stacks" / "npu_stack.json"
    elsewhere.parent.mkdir()
    shutil.copy(CASE / "target" / "stack.json", elsewhere)
    return target / "dump.json", elsewhere


def compare_json(tmp_path, target, stack_path=None):
    config = {"npu_path": str(target), "bench_path": str(CASE / "golden" / "dump.json"),
              "is_print_compare_log": False}
    if stack_path is not None:
        config["stack_path"] = str(stack_path)
    (tmp_path / "compare.json").write_text(json.dumps(config))
    return tmp_path / "compare.json"


def header_and_stacks(out) -> tuple[list, list]:
    table = read_csv(only_file(out, "compare_result_*.csv"))
    header = table[0]
    stacks = [row[header.index("NPU_Stack_Info")] for row in table[1:]] if "NPU_Stack_Info" in header else []
    return header, stacks


def test_stack_path_with_s_gives_the_stack_of_that_file(tmp_path, bare_target):
    target, elsewhere = bare_target
    config = compare_json(tmp_path, target, elsewhere)
    assert run_cli(["-f", "pytorch", "compare", "-i", config, "-o", tmp_path / "o", "-s", "--csv", "-c"]) == 0
    _, stacks = header_and_stacks(tmp_path / "o")
    assert run_cli(["compare", "-tp", CASE / "target" / "dump.json", "-gp", CASE / "golden" / "dump.json",
                    "-o", tmp_path / "beside", "--csv", "-c"]) == 0
    _, beside = header_and_stacks(tmp_path / "beside")
    assert stacks == beside and any(s.startswith("['File ") for s in stacks)


def test_stack_path_without_s_gives_no_stack(tmp_path):
    config = compare_json(tmp_path, CASE / "target" / "dump.json", CASE / "target" / "stack.json")
    assert run_cli(["-f", "pytorch", "compare", "-i", config, "-o", tmp_path / "o", "--csv", "-c"]) == 0
    header, _ = header_and_stacks(tmp_path / "o")
    assert "NPU_Stack_Info" not in header and header[-2:] == ["Err_message", "Error_Origin"]


@pytest.mark.parametrize("form", ["legacy", "current"])
def test_s_without_a_stack_file_is_an_error(tmp_path, capsys, bare_target, form):
    target, _ = bare_target
    if form == "legacy":
        args = ["-f", "pytorch", "compare", "-i", compare_json(tmp_path, target), "-s"]
    else:
        args = ["compare", "-tp", target, "-gp", CASE / "golden" / "dump.json", "--stack_mode"]
    assert run_cli(args + ["-o", tmp_path / "o"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-s/--stack_mode: no stack file for" in err[0] and "stack.json does not exist" in err[0]
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_a_missing_stack_path_is_an_error(tmp_path, capsys, bare_target):
    target, _ = bare_target
    config = compare_json(tmp_path, target, tmp_path / "nowhere" / "stack.json")
    assert run_cli(["-f", "pytorch", "compare", "-i", config, "-o", tmp_path / "o", "-s"]) == 1
    err = capsys.readouterr().err
    assert "stack_path" in err and "does not exist" in err and err.count("\n") == 1


def test_without_s_the_stack_beside_the_target_is_optional(tmp_path, bare_target):
    target, _ = bare_target
    assert run_cli(["compare", "-tp", target, "-gp", CASE / "golden" / "dump.json", "-o", tmp_path / "o",
                    "--csv", "-c"]) == 0
    header, _ = header_and_stacks(tmp_path / "o")
    assert "NPU_Stack_Info" not in header
