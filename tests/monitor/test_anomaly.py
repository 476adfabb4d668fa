"""The alert rules on hand-made records: what is an anomaly, what is not, and the record it makes."""

from __future__ import annotations

import math

import pytest

from msprobe.monitor.anomaly import AlertConfigError, AnomalyDetector, parse_rules
from tests.monitor.records_factory import records, row, wobble

TURBULENCE = [("AnomalyTurbulence", {"threshold": 0.5})]       # the reference's documented setting
NAN = [("AnomalyNan", {"threshold": 1e10})]


def run(detector, steps):
    found = []
    for step, rows in enumerate(steps):
        found += detector.observe(records(step, rows))
    return found


def weight_rows(step, scale=1.0):
    return [row("param_origin", "fc1.weight", norm=3.0 * wobble(step, 0.01) * scale, mean=0.01, shape=(16, 8)),
            row("grad_unreduced", "fc1.weight", norm=0.1 * wobble(step, 0.3))]


def test_a_clean_noisy_series_raises_nothing():
    steps = [weight_rows(s) + [row("actv", "fc1.output", norm=40 * wobble(s, 0.25, 1.0), mean=0.3 * wobble(s))]
             for s in range(300)]
    assert run(AnomalyDetector(TURBULENCE), steps) == []


def test_a_weight_scaled_at_step_20_is_a_spike_there_with_its_baseline():
    steps = [weight_rows(s, 50.0 if s >= 20 else 1.0) for s in range(40)]
    found = run(AnomalyDetector(TURBULENCE), steps)
    first = found[0]
    assert (first.kind, first.step, first.group, first.op, first.name, first.module) == \
        ("spike", 20, "param_origin", "norm", "fc1.weight", "fc1")
    assert first.rule == "AnomalyTurbulence" and first.stage == "optimizer"
    assert first.value == pytest.approx(150.0, rel=0.02) and first.baseline == pytest.approx(3.0, rel=0.02)
    # a new level: reported once, where it starts; after 3 steps at it the baseline restarts from it
    assert [a.step for a in found] == [20]


def test_a_gradient_falling_tenfold_is_a_drop():
    steps = [[row("grad_unreduced", "fc1.weight", norm=0.1 * wobble(s, 0.3) * (0.1 if s == 30 else 1.0))]
             for s in range(40)]
    found = run(AnomalyDetector(TURBULENCE), steps)
    assert [(a.kind, a.step, a.op) for a in found] == [("drop", 30, "norm")]
    assert found[0].value < found[0].baseline / 5


def test_adam_states_growing_from_zero_are_no_anomaly():
    m = v = 0.0
    steps = []
    for s in range(400):
        g = 0.1 * wobble(s, 0.4)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        steps.append([row("exp_avg", "fc1.weight", norm=m * 11.3, mean=m * 0.1),
                      row("exp_avg_sq", "fc1.weight", norm=v * 11.3, mean=v)])
    assert run(AnomalyDetector(TURBULENCE), steps) == []


def test_a_mean_near_zero_is_judged_against_the_tensor_rms_not_itself():
    # the mean flips sign and changes 100-fold relative to itself: nothing, its rms is 1
    steps = [[row("actv", "ln.output", norm=64.0, shape=(4096,), mean=1e-4 * math.sin(2.3 * s))] for s in range(60)]
    assert run(AnomalyDetector(TURBULENCE), steps) == []
    # a mean moved by 0.8 of the rms is a spike (the norm grows only 28 %: the norm rule alone would miss it)
    steps[40] = [row("actv", "ln.output", norm=64.0 * math.sqrt(1 + 0.64), shape=(4096,), mean=0.8)]
    found = run(AnomalyDetector(TURBULENCE), steps)
    assert [(a.kind, a.step, a.op) for a in found] == [("spike", 40, "mean")]
    assert abs(found[0].baseline) < 1e-3


def test_gradient_means_are_not_judged():
    steps = [[row("grad_unreduced", "bn.bias", norm=0.01, shape=(8,), mean=0.003 * (-1) ** s)] for s in range(60)]
    assert run(AnomalyDetector(TURBULENCE), steps) == []


def test_a_loss_spike_is_flagged_a_falling_loss_is_not():
    def loss(s):
        value = 4.0 * math.exp(-s / 60) * wobble(s, 0.05) + 0.2
        return value * (3 if s == 150 else 1) * (0.2 if s == 170 else 1)
    steps = [[row("loss", "loss", norm=loss(s), mean=loss(s), shape=())] for s in range(200)]
    found = run(AnomalyDetector(TURBULENCE), steps)
    assert [(a.kind, a.step, a.group, a.op) for a in found] == [("spike", 150, "loss", "mean")]


def test_nothing_is_judged_during_the_warmup():
    steps = [[row("actv", "x.output", norm=10.0 * (100 if s == 5 else 1))] for s in range(30)]
    assert run(AnomalyDetector(TURBULENCE), steps) == []
    steps = [[row("actv", "x.output", norm=10.0 * (100 if s == 5 else 1))] for s in range(30)]
    found = run(AnomalyDetector([("AnomalyTurbulence", {"threshold": 0.5, "warmup": 3, "recent": 3})]), steps)
    assert [a.step for a in found] == [5]


def test_a_nan_is_reported_where_it_appears_once_not_while_it_stays():
    def rows(s):
        bad = 20 <= s < 25 or s == 30
        return [row("actv", "fc1.output", nans=3.0 if bad else 0.0, max=math.nan if bad else 1.0),
                row("actv", "fc2.output", min=-math.inf if s == 22 else -1.0)]
    found = run(AnomalyDetector(NAN), [rows(s) for s in range(35)])
    assert [(a.kind, a.step, a.name, a.op) for a in found] == [
        ("nan", 20, "fc1.output", "nans"), ("inf", 22, "fc2.output", "min"), ("nan", 30, "fc1.output", "nans")]
    assert all(a.rule == "AnomalyNan" for a in found)


def test_an_absent_gradient_is_not_a_nan():
    steps = [[row("actv_grad", "emb.input", present=False), row("actv_grad", "emb.output", norm=0.1)]
             for _ in range(20)]
    for detector in (AnomalyDetector(NAN), AnomalyDetector(TURBULENCE)):
        assert run(detector, steps) == []


def test_the_turbulence_rule_reports_nans_too():
    steps = [[row("actv", "fc1.output", nans=1.0 if s == 12 else 0.0)] for s in range(15)]
    found = run(AnomalyDetector(TURBULENCE), steps)
    assert [(a.kind, a.step, a.rule) for a in found] == [("nan", 12, "AnomalyTurbulence")]


def test_the_nan_rule_threshold_flags_huge_values():
    steps = [[row("actv", "fc1.output", max=5e10 if s == 3 else 1.0)] for s in range(6)]
    found = run(AnomalyDetector(NAN), steps)
    assert [(a.kind, a.step, a.value, a.baseline) for a in found] == [("spike", 3, 5e10, 1e10)]
    assert run(AnomalyDetector([("AnomalyNan", None)]), steps) == []


def test_micro_steps_of_one_step_are_judged_in_order():
    steps = [[row("actv", "fc1.output", norm=5.0 * wobble(2 * s + m, 0.1), micro_step=m) for m in (0, 1)]
             for s in range(30)]
    steps[20][1] = row("actv", "fc1.output", norm=500.0, micro_step=1)
    found = run(AnomalyDetector(TURBULENCE), steps)
    assert [(a.step, a.micro_step, a.kind) for a in found] == [(20, 1, "spike")]


def test_no_rule_finds_nothing():
    steps = [[row("actv", "x.output", nans=1.0, norm=10.0 ** s)] for s in range(20)]
    assert run(AnomalyDetector(()), steps) == []


def test_memory_stays_flat_over_steps():
    detector = AnomalyDetector(TURBULENCE)
    run(detector, [weight_rows(s) for s in range(100)])
    size = detector._history.values.nbytes
    run(detector, [weight_rows(s) for s in range(100, 1100)])
    assert detector._history.values.nbytes == size


@pytest.mark.parametrize("rules, message", [
    ([("AnomalyFoo", {})], "'AnomalyFoo' is not supported"),
    ([("AnomalyTurbulence", {"threshold": "high"})], "threshold must be a number"),
    ([("AnomalyTurbulence", {"threshold": -1})], "threshold and spread must be > 0"),
    ([("AnomalyTurbulence", {"limit": 1})], "unknown argument 'limit'"),
    ([("AnomalyNan", {"threshold": 0})], "threshold must be > 0"),
    ([("AnomalyTurbulence", {"window": 2.5})], "window must be a whole number"),
])
def test_bad_rules_are_one_clear_error(rules, message):
    with pytest.raises(AlertConfigError, match=message):
        AnomalyDetector(rules)


def test_the_reference_rule_dicts_are_accepted():
    turbulence, nan = parse_rules([{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.3}},
                                   {"rule_name": "AnomalyNan"}])
    assert turbulence.threshold == 0.3 and nan.threshold is None
