"""The collectors' configuration (msprobe.collect.config): validated in full before training starts, unknown keys
named with the closest known one, ranges kept as ranges, the reference's config.json format accepted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from msprobe.collect.config import PYTORCH, ConfigSpec, DumpConfigError, Ranges, load_config
from msprobe.errors import MsprobeError

# the reference msprobe 26.2.0's own config.json: task sections of its other tools (acc_check) included
REFERENCE_CONFIG = {
    "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [], "level": "L1", "extra_info": True,
    "async_dump": False,
    "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"},
    "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
    "acc_check": {"white_list": [], "black_list": [], "error_data_path": "./"},
}


def write(tmp_path: Path, content) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(content))
    return str(path)


def test_the_reference_config_format_is_read(tmp_path):
    config = load_config(write(tmp_path, {**REFERENCE_CONFIG, "dump_path": str(tmp_path / "d"), "rank": [0, "2-3"],
                                          "step": ["1-2", 5], "task": "tensor",
                                          "tensor": {"scope": ["linear"], "list": [], "data_mode": ["forward"]}}))
    assert (config.task, config.level, config.dump_path) == ("tensor", "L1", str(tmp_path / "d"))
    assert config.step.intervals == ((1, 2), (5, 5)) and config.rank.intervals == ((0, 0), (2, 3))
    assert (config.scope, config.data_mode, config.framework) == (("linear",), ("forward",), "pytorch")
    assert [config.wants_step(n) for n in range(7)] == [False, True, True, False, False, True, False]
    assert config.wants_rank(None) and config.wants_rank(3) and not config.wants_rank(1)


@pytest.mark.parametrize("content, key, suggestion", [
    ({"taks": "tensor"}, "taks", "task"),
    ({"statistics": {"scoope": ["x"]}}, "scoope", "scope"),
    ({"tensor": {"data_mod": ["all"]}}, "data_mod", "data_mode"),
    ({"statistic": {}}, "statistic", "statistics"),
    ({"summarymode": "md5"}, "summarymode", "summary_mode"),
])
def test_an_unknown_key_names_the_closest_known_one(tmp_path, content, key, suggestion):
    with pytest.raises(DumpConfigError) as info:
        load_config(write(tmp_path, {**content, "dump_path": str(tmp_path / "d")}))
    message = str(info.value)
    assert f"unknown key {key!r}" in message and f"did you mean '{suggestion}'?" in message
    assert "\n" not in message


def test_an_unknown_keyword_argument_is_refused_the_same_way(tmp_path):
    with pytest.raises(DumpConfigError, match=r"unknown key 'levle' in the keyword arguments \(did you mean 'level'"):
        load_config(dump_path=str(tmp_path / "d"), levle="L0")
    # the keys of the reference's config.json that change nothing here are accepted
    config = load_config(dump_path=str(tmp_path / "d"), extra_info=True, seed=1, framework="pytorch")
    assert config.level == "L1"


def test_a_framework_adds_its_own_keys():
    spec = ConfigSpec(framework="mindspore", levels=("L0", "L1", "mix", "L2"), section_ignored=("device",))
    assert spec.framework == "mindspore" and PYTORCH.levels == ("L0", "L1", "mix")


def test_ranges_are_kept_as_ranges(tmp_path):
    started = time.perf_counter()
    config = load_config(dump_path=str(tmp_path / "d"), step=["0-100000000000", 7], rank=["0-3000000"])
    assert time.perf_counter() - started < 0.5           # eager expansion took 90 ms for 3 million, MemoryError here
    assert config.step.intervals == ((0, 100000000000),)
    assert 99999999999 in config.step and 100000000001 not in config.step
    assert config.wants_rank(3000000) and not config.wants_rank(3000001)


def test_ranges_merge_and_iterate():
    ranges = Ranges.parse("step", [5, "1-3", 4, "10-11", 3])
    assert ranges.intervals == ((1, 5), (10, 11))
    assert list(ranges) == [1, 2, 3, 4, 5, 10, 11]
    assert bool(ranges) and not Ranges() and Ranges.parse("step", None) == Ranges()
    assert repr(ranges) == "Ranges([1-5, 10-11])"
    assert 0 not in ranges and 6 not in ranges and 11 in ranges


@pytest.mark.parametrize("value", [3, [1, "x"], [-1], ["3-1"], [True], ["1-2-3"], ["１-２"]])
def test_bad_step_lists_are_refused(tmp_path, value):
    with pytest.raises(DumpConfigError, match="step"):
        load_config(dump_path=str(tmp_path / "d"), step=value)


@pytest.mark.parametrize("config_path", [0, 1, True, 3.5, b"config.json"])
def test_config_path_must_be_a_path(tmp_path, config_path):
    with pytest.raises(DumpConfigError, match="config_path must be a path"):
        load_config(config_path)


def test_config_path_may_be_path_like_and_a_descriptor_is_never_touched(tmp_path):
    path = Path(write(tmp_path, {"dump_path": str(tmp_path / "d"), "level": "L0"}))
    assert load_config(path).level == "L0"
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(DumpConfigError):
            load_config(read_end)
        os.fstat(read_end)                  # still open: an int is not opened as a file descriptor
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_nul_in_dump_path_or_config_path_is_a_config_error(tmp_path):
    with pytest.raises(DumpConfigError, match="NUL"):
        load_config(dump_path=str(tmp_path / "a\x00b"))
    with pytest.raises(DumpConfigError, match="NUL"):
        load_config(str(tmp_path / "c\x00.json"))
    config = load_config(dump_path=tmp_path / "pathlike")            # os.PathLike dump_path
    assert config.dump_path == str(tmp_path / "pathlike")


@pytest.mark.parametrize("content, message", [
    ([1, 2], "must hold a JSON object"),
    ({"statistics": [1]}, "section 'statistics' must be an object"),
    ({"task": "overflow_check"}, "task"),
    ({"level": "L2"}, "level"),
    ({"data_mode": ["sideways"]}, "data_mode"),
    ({"summary_mode": "xor"}, "summary_mode"),
    ({"async_dump": True}, "async_dump"),
    # issue 34: a text is named with the type expected (it read "'async_dump' true is not supported")
    ({"async_dump": "false"}, r"'async_dump' must be a boolean \(true or false\), got 'false' \(str\)"),
    ({"async_dump": 0}, r"must be a boolean .*got 0 \(int\)"),
    # md5 is a statistics task's mode: a tensor task given it was accepted silently
    ({"task": "tensor", "summary_mode": "md5"}, "'summary_mode' 'md5' applies to task statistics only"),
    ({"task": "tensor", "tensor": {"summary_mode": "md5"}}, "applies to task statistics only"),
    ({"scope": "linear"}, "scope"),
    # risk_level was accepted and ignored, whatever its value
    ({"risk_level": "HIGH"}, r"^config 'risk_level' must be one of CORE, FOCUS, ALL, got 'HIGH'$"),
    ({"risk_level": ["ALL"]}, r"^config 'risk_level' must be one of CORE, FOCUS, ALL, got \['ALL'\]$"),
])
def test_invalid_values(tmp_path, content, message):
    if isinstance(content, dict):
        content = {"dump_path": str(tmp_path / "d"), **content}
    with pytest.raises(DumpConfigError, match=message) as info:
        load_config(write(tmp_path, content))
    assert isinstance(info.value, MsprobeError)


@pytest.mark.parametrize("value, expected", [(None, "ALL"), ("", "ALL"), ("CORE", "CORE"), ("ALL", "ALL")])
def test_risk_level_is_read_as_the_reference_reads_it(tmp_path, value, expected):
    """The reference's PyTorch collector: absent = FOCUS; null or "" = every API (ALL); CORE, FOCUS, ALL."""
    assert load_config(write(tmp_path, {"dump_path": str(tmp_path / "d")})).risk_level == "FOCUS"
    assert load_config(write(tmp_path, {"dump_path": str(tmp_path / "d"), "risk_level": value})).risk_level \
        == expected
    assert load_config(dump_path=str(tmp_path / "d"), risk_level=value).risk_level == \
        ("FOCUS" if value is None else expected)       # a keyword argument None is "not given"
