"""Names are data (issue 28): a name from a dump reaches the console, the log and the text files of msprobe with its
control characters escaped, so a hostile dump cannot retitle the terminal, write its clipboard (OSC 52) or
overwrite a line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from helpers_bad_input import run_inproc, stat_record, stats_dump, write_json

from msprobe.names import counter, printable

from conftest import FIXTURES

ESC_NAME = "Functional.add\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m\r\u202e.0.forward"
RAW = ("\x1b", "\x07", "\x9b", "\r", "\u202e")


def _hostile_pair(tmp_path):
    target = stats_dump({ESC_NAME: {"input_args": [stat_record()], "output": [stat_record(Max=9.0, Norm=50.0)]}})
    golden = stats_dump({ESC_NAME: {"input_args": [stat_record()], "output": [stat_record(Max=1.0, Norm=1.0)]}})
    return (write_json(tmp_path / "in" / "target" / "dump.json", target),
            write_json(tmp_path / "in" / "golden" / "dump.json", golden))


def _assert_escaped(text: str) -> None:
    assert not any(char in text for char in RAW), repr(text)


@pytest.mark.parametrize("extra", [[], ["-da"]])
def test_console_summary_da_line_and_advisor_escape_control_characters(tmp_path, capsys, extra):
    tp, gp = _hostile_pair(tmp_path)
    out = tmp_path / "out"
    run = run_inproc(["compare", "-tp", tp, "-gp", gp, "-o", out, "--csv", *extra], capsys)
    assert run.code == 0, run.err
    _assert_escaped(run.out + run.err)
    assert "Functional.add\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x9b31m\\r\\u202e.0.forward" in run.out
    if not extra:
        assert "culprit: Functional.add\\x1b" in run.out                # the console summary's culprit
        advisor = next(out.glob("advisor_*.txt")).read_text(encoding="utf-8")
        _assert_escaped(advisor)
        assert "Suspect Nodes: Functional.add\\x1b]52" in advisor
    else:
        assert "Divergence starts on rank 0 at Functional.add\\x1b]52" in run.out      # the -da line


def test_error_lines_escape_control_characters(tmp_path, capsys):
    """A name inside an error message (here a refused formula-like entry name) is escaped on stderr too."""
    name = "=HYPERLINK(\x1b]0;owned\x07).0.forward"
    target = stats_dump({name: {"input_args": [stat_record()], "output": [stat_record()]}})
    tp = write_json(tmp_path / "t" / "dump.json", target)
    run = run_inproc(["compare", "-tp", tp, "-gp", tp, "-o", tmp_path / "out"], capsys)
    assert run.code != 0 and "\\x1b]0;owned\\x07" in run.err
    _assert_escaped(run.err)


def test_records_reach_an_api_users_handler_escaped():
    """The msprobe logger escapes the message itself, for any handler an API user attaches."""
    from msprobe.log import get_logger

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(self.format(record))

    logger = get_logger()
    handler = Keep()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info("entry %s", "a\x1b]52;c;x\x07b\nnext line")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert seen == ["entry a\\x1b]52;c;x\\x07b\\nnext line"]   # a line end inside a name forges no line


def test_printable_and_counter():
    assert printable("plain name") == "plain name"
    assert printable("a\tb\nc\x00\x7f\x85\ud800") == "a\\tb\\nc\\x00\\x7f\\x85\\ud800"
    assert printable("line\nnext\r", keep_newlines=True) == "line\nnext\\r"
    assert counter("12") == 12 and counter("007") == 7
    assert counter("²") is None and counter("٣") is None and counter("") is None and counter("-1") is None


def _superscript_dump(tmp_path) -> Path:
    """stats_mix's target with one module backward counter spelled '²' (passes str.isdigit(), not int())."""
    source = FIXTURES / "stats_mix_step0" / "target"
    folder = tmp_path / "superscript"
    folder.mkdir()
    for name in ("dump.json", "construct.json", "stack.json"):
        content = json.loads((source / name).read_text())
        if name == "dump.json":
            content["data"] = {SUPERSCRIPT if k == "Module.lm_head.Linear.backward.0" else k: v
                               for k, v in content["data"].items()}
        elif name == "construct.json":
            content = {SUPERSCRIPT if k == "Module.lm_head.Linear.backward.0" else k: v for k, v in content.items()}
        (folder / name).write_text(json.dumps(content), encoding="utf-8")
    return folder


SUPERSCRIPT = "Module.lm_head.Linear.backward.\u00b2"


@pytest.mark.parametrize("golden", [False, True])
def test_graph_of_an_entry_counted_with_a_superscript_digit(tmp_path, capsys, golden):
    folder = _superscript_dump(tmp_path)
    argv = ["graph", "-tp", folder, "-o", tmp_path / "out", "-j", "1"] + (["-gp", folder] if golden else [])
    run = run_inproc(argv, capsys)
    assert run.code == 0 and "internal error" not in run.err, run.err
    assert len(list((tmp_path / "out").glob("*.vis"))) == 1


def test_compare_of_an_entry_counted_with_a_superscript_digit(tmp_path, capsys):
    folder = _superscript_dump(tmp_path)
    run = run_inproc(["compare", "-tp", folder / "dump.json", "-gp", folder / "dump.json", "-o", tmp_path / "o"],
                     capsys)
    assert run.code == 0, run.err


@pytest.mark.parametrize("value", ["\u00b2", "0,\u0663", "\uff11"])
def test_kernel_compare_rank_and_step_of_other_digits_are_usage_errors(tmp_path, capsys, value):
    for option in ("--rank", "--step"):
        run = run_inproc(["compare", "-tp", tmp_path, "-gp", tmp_path, "-o", tmp_path / "o", option, value], capsys)
        assert run.code == 1 and "internal error" not in run.err, run.err
        assert f"{option} must be a comma-separated list of non-negative integers" in run.err
