"""The monitor config: the reference's keys, defaults, one error line for a wrong value, one warning per key that is
not honoured."""

from __future__ import annotations

import json

import pytest

from msprobe.monitor.config import MonitorConfig, MonitorConfigError, Target, load_config, parse_config


def test_defaults_match_the_reference():
    config = parse_config({})
    assert config == MonitorConfig()
    assert config.ops == ("norm",) and config.ndigits == 6 and config.eps == 1e-8 and config.format == "csv"
    assert config.collect_times == 100_000_000 and config.step_interval == 1 and config.start_step == 0
    assert not config.records_anything and config.warnings == ()


def test_reference_documented_config_is_accepted():
    data = {
        "targets": {"language_model.encoder.layers.0": {"input": "tuple[2]:0", "output": "tensor"}},
        "dynamic_on": False, "start_step": 0, "collect_times": 1e8, "step_interval": 1, "print_struct": False,
        "module_ranks": [0, 1, 2, 3], "ur_distribution": True, "xy_distribution": True, "all_xy": True,
        "forward_only": False, "backward_only": False, "mv_distribution": True, "param_distribution": True,
        "wg_distribution": True, "monitor_mbs_grad": True, "cc_distribution": {"enable": True, "cc_codeline": []},
        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": False},
        "format": "csv", "ops": ["min", "max", "norm", "zeros", "nans", "mean"], "eps": 1e-8, "ndigits": 12,
        "step_count_per_record": 1, "append_output": [], "squash_name": False}
    config = parse_config(data)
    assert config.ops == ("min", "max", "norm", "zeros", "nans", "mean")          # the CSV's column order
    assert config.record_ops == ("min", "max", "mean", "norm", "zeros", "nans")   # OPS order
    assert config.targets == (Target("language_model.encoder.layers.0"),)
    assert config.alert.rules[0][0] == "AnomalyTurbulence" and config.alert.rules[0][1]["threshold"] == 0.5
    assert config.collect_times == 100_000_000 and config.module_ranks == (0, 1, 2, 3) and config.ndigits == 12
    text = " | ".join(config.warnings)
    assert "monitor_mbs_grad" in text and "cc_distribution" in text and "selectors" in text
    assert "squash_name" not in text and "append_output" not in text      # left at values that change nothing


@pytest.mark.parametrize("data, words", [
    ({"wg_distribution": "yes"}, "wg_distribution"),
    ({"alert": {"rules": [{"rule_name": "Foo"}]}}, "Foo"),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulenc", "args": {"threshold": 1}}]}}, "did you mean"),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence"}]}}, "threshold"),
    ({"alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": -1}}]}}, "positive"),
    ({"eps": "x"}, "eps"),
    ({"step_interval": 0}, "step_interval"),
    ({"start_step": -1}, "start_step"),
    ({"ndigits": 2.5}, "ndigits"),
    ({"format": "tb"}, "format"),
    ({"targets": ["a"]}, "targets"),
    ({"ops": "norm"}, "ops"),
    ({"action": "halt"}, "action"),
    ({"golden": "/no/such/run"}, "golden"),
    ({"module_ranks": [-1]}, "module_ranks"),
])
def test_a_wrong_value_is_one_error_line(data, words):
    with pytest.raises(MonitorConfigError) as info:
        parse_config(data)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_unknown_keys_and_ops_warn_with_the_closest_name():
    config = parse_config({"wg_distributon": True, "ops": ["nrom", "id", "shape", "max"], "alert": {"dumps": 1}})
    text = " | ".join(config.warnings)
    assert "'wg_distributon' is unknown (did you mean 'wg_distribution'?)" in text
    assert "'nrom' is unknown (did you mean 'norm'?)" in text and "'id' is not recorded" in text
    assert "shape" not in text           # shape and dtype are always columns
    assert config.ops == ("max",) and not config.wg_distribution
    assert parse_config({"ops": ["bogus"]}).ops == ("norm",)


def test_targets_with_chunk_prefix_and_coverage():
    config = parse_config({"targets": {"two": {}, "0:bn": {}, "shared.weight": {}}, "xy_distribution": True})
    assert config.xy_target("two", 0) and config.xy_target("bn", 0) and not config.xy_target("bn", 1)
    assert not config.xy_target("two.a", 0)                  # activations: the named modules only
    assert config.param_target("two.a.weight", 0) and config.param_target("shared.weight", 0)
    assert not config.param_target("shared.bias", 0) and not config.param_target("twofold.weight", 0)
    everything = parse_config({"targets": {}, "xy_distribution": True})
    assert everything.xy_target("anything", 3) and everything.param_target("x.weight", 0)
    assert parse_config({"targets": {"": {}}}).targets == ()
    assert parse_config({"targets": {"two": {}}, "all_xy": True}).xy_target("other", 0)


def test_forward_and_backward_only_both_set_record_no_activation():
    config = parse_config({"xy_distribution": True, "forward_only": True, "backward_only": True})
    assert not config.activations and "no activation" in " ".join(config.warnings)


def test_golden_and_action(tmp_path):
    config = parse_config({"golden": str(tmp_path), "action": "stop"})
    assert config.golden == str(tmp_path) and config.action == "stop" and not config.warnings
    assert "nothing to act on" in " ".join(parse_config({"action": "stop"}).warnings)


def test_load_config_errors_are_one_line(tmp_path):
    with pytest.raises(MonitorConfigError, match="cannot read"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MonitorConfigError, match="not valid JSON"):
        load_config(bad)
    bad.write_text("[1]")
    with pytest.raises(MonitorConfigError, match="JSON object"):
        load_config(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"wg_distribution": True}))
    assert load_config(good).wg_distribution
    with pytest.raises(MonitorConfigError):
        load_config(None)
