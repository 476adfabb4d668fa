"""Names are data (issue 28): a name from a dump reaches the console, the log and the text files of msprobe with its
control characters escaped, so a hostile dump cannot retitle the terminal, write its clipboard (OSC 52) or
overwrite a line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from helpers_bad_input import assert_outputs, assert_success, run_inproc, stat_record, stats_dump, write_json

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


@pytest.mark.usefixtures("fresh_logger")
def test_a_line_end_in_an_output_path_forges_no_log_line(tmp_path, capsys, monkeypatch):
    """An output folder named 'x\\n2026-… [ERROR] …' printed a log line the run never wrote: the log kept the line
    ends of its arguments (the paths and names it shows). A line end inside a name is now '\\n' as every other
    control character; the line ends msprobe's own messages hold stay."""
    from helpers_bad_input import STATS_MIX

    monkeypatch.chdir(tmp_path)
    forged = "2026-01-01 00:00:00 (1) [ERROR] forged"
    out = tmp_path / f"out\n{forged}"
    run = run_inproc(["compare", "-tp", STATS_MIX / "target" / "dump.json", "-gp", STATS_MIX / "golden" / "dump.json",
                      "-o", out, "--csv"], capsys)
    assert_success(run)
    assert not [line for line in run.out.splitlines() if line.startswith(forged)]
    assert "out\\n2026-01-01" in run.out
    assert_outputs(out, "csv")


@pytest.mark.usefixtures("fresh_logger")
def test_the_log_keeps_line_ends_of_its_own_messages(capsys):
    from msprobe.log import get_logger, setup_logging

    setup_logging(take_over=True)
    get_logger().warning("first line\nsecond line: %s", "a\nb")
    out = capsys.readouterr().out
    assert "first line\nsecond line: a\\nb" in out


@pytest.mark.usefixtures("fresh_logger")
def test_invisible_characters_of_a_name_are_shown():
    """Two names that differ by a zero-width space, a word joiner or a BOM looked identical on the console."""
    from msprobe.names import printable

    assert printable("Functional.re\u200blu.0") == "Functional.re\\u200blu.0"
    assert printable("a\u2060b\ufeffc\u200cd\u200de") == "a\\u2060b\\ufeffc\\u200cd\\u200de"


@pytest.mark.usefixtures("fresh_logger")
def test_an_error_line_about_a_name_of_ten_thousand_characters_stays_short(tmp_path, capsys):
    """The error line quoted a 10,000-character entry name whole: one error line, but not a readable one. Error
    lines longer than names.LONGEST_LINE keep their start and end and say how much was left out."""
    from msprobe.names import LONGEST_LINE

    name = "=" + "x" * 10_000 + ".0.forward"
    target = stats_dump({name: {"input_args": [], "input_kwargs": {}, "output": []}})
    tp = write_json(tmp_path / "t" / "dump.json", target)
    run = run_inproc(["compare", "-tp", tp, "-gp", tp, "-o", tmp_path / "out", "--csv"], capsys)
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert run.code == 1 and len(lines) == 1
    assert len(lines[0]) <= LONGEST_LINE + 40
    assert lines[0].startswith("msprobe compare: error: ") and "characters left out" in lines[0]
