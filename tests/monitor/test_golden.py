"""The golden watch on hand-made records: where a difference is made (the compare core's verdict), what is carried,
what rounding explains, the golden read from its files one step at a time."""

from __future__ import annotations

import math

import pytest

from msprobe.monitor.golden import GoldenWatch, divergences, split_name
from msprobe.monitor.layout import RunWriter
from tests.monitor.records_factory import records, row

BF16 = 2.0 ** -8         # the relative rounding of bfloat16 (half its eps)


def model_rows(step, *, fc2_scale=1.0, act_scale=1.0, weight_scale=1.0, rounding=0.0, dtype="torch.float32",
               drift=0.0):
    """A two-layer MLP's records: fc1 -> act -> fc2 forward and backward, their weights. rounding: a relative
    perturbation of every activation (a lower precision), alternating in sign; drift: of the weights."""
    def jiggle(value, i):
        return value * (1 + rounding * (1 if (i + step) % 2 else -1) * (0.5 + 0.5 * math.sin(i)))
    x = 3.0 + 0.1 * math.sin(step)
    h = 4.0 * x
    a = 0.6 * h * act_scale
    y = 0.5 * a * fc2_scale
    w1, w2 = 2.0 * (1 + drift), 1.5 * weight_scale * (1 + drift)
    out = [row("param_origin", "fc1.weight", norm=w1, mean=0.01, shape=(8, 4)),
           row("param_origin", "fc2.weight", norm=w2, mean=-0.02, shape=(2, 8)),
           row("actv", "fc1.input", norm=x, mean=0.1 * x, shape=(4, 4)),
           row("actv", "fc1.output", norm=jiggle(h, 1), mean=0.1 * h, shape=(4, 8), dtype=dtype),
           row("actv", "act.input", norm=jiggle(h, 1), mean=0.1 * h, shape=(4, 8), dtype=dtype),
           row("actv", "act.output", norm=jiggle(a, 2), mean=0.2 * a, shape=(4, 8), dtype=dtype),
           row("actv", "fc2.input", norm=jiggle(a, 2), mean=0.2 * a, shape=(4, 8), dtype=dtype),
           row("actv", "fc2.output", norm=jiggle(y, 3), mean=0.05 * y, shape=(4, 2), dtype=dtype),
           row("actv_grad", "fc2.output", norm=0.1, mean=0.001, shape=(4, 2)),
           row("actv_grad", "fc2.input", norm=0.08 * fc2_scale, mean=0.001, shape=(4, 8)),
           row("actv_grad", "act.output", norm=0.08 * fc2_scale, mean=0.001, shape=(4, 8)),
           row("actv_grad", "act.input", norm=0.05 * fc2_scale, mean=0.001, shape=(4, 8)),
           row("actv_grad", "fc1.output", norm=0.05 * fc2_scale, mean=0.001, shape=(4, 8)),
           row("actv_grad", "fc1.input", present=False),
           row("grad_unreduced", "fc1.weight", norm=0.2 * fc2_scale, mean=0.001, shape=(8, 4)),
           row("grad_unreduced", "fc2.weight", norm=0.3, mean=0.001, shape=(2, 8)),
           row("param_updated", "fc1.weight", norm=w1, mean=0.01, shape=(8, 4)),
           row("param_updated", "fc2.weight", norm=w2, mean=-0.02, shape=(2, 8))]
    return records(step, out)


def test_names():
    assert split_name("layers.0.fc1.input") == ("layers.0.fc1", "input")
    assert split_name("lstm.output_1") == ("lstm", "output")
    assert split_name(".output") == ("", "output")
    assert split_name("fc1.weight") == ("fc1.weight", "")


def test_identical_steps_name_nothing():
    assert divergences(model_rows(3), model_rows(3)) == []


def test_an_output_made_wrong_by_its_module_is_the_divergence():
    found = divergences(model_rows(4, fc2_scale=1.3), model_rows(4))
    assert len(found) == 1
    first = found[0]
    assert (first.kind, first.step, first.module, first.name, first.stage, first.rule) == \
        ("divergence", 4, "fc2", "fc2.output", "forward", "GoldenDivergence")
    assert first.op in ("norm", "mean", "max", "min") and first.baseline is not None
    assert first.value != first.baseline


def test_what_is_carried_from_a_module_before_is_not_made_again():
    # act made the difference; fc2 reads it: only act is named
    found = divergences(model_rows(4, act_scale=1.5), model_rows(4), first_only=False)
    assert {a.module for a in found} == {"act"}


def test_a_weight_changed_between_steps_is_made_there_not_at_its_module():
    golden = [model_rows(s) for s in (5, 6)]
    target = [model_rows(5), model_rows(6, weight_scale=50)]
    assert divergences(target[0], golden[0]) == []
    found = divergences(target[1], golden[1], previous=(target[0], golden[0]), first_only=False)
    assert [(a.group, a.name, a.module) for a in found] == [("param_origin", "fc2.weight", "fc2")]


def test_a_lower_precision_target_is_no_divergence():
    golden = [model_rows(s) for s in range(4)]
    target = [model_rows(s, rounding=BF16, dtype="torch.bfloat16", drift=1e-4 * s) for s in range(4)]
    previous = (None, None)
    for t, g in zip(target, golden):
        assert divergences(t, g, previous) == []
        previous = (t, g)


def test_a_gradient_made_wrong_by_a_backward_is_the_divergence():
    golden = model_rows(2)
    target = model_rows(2)
    grad = target.name.index("fc1.weight", target.group.index("grad_unreduced"))
    target.values[grad] *= 0.1
    found = divergences(target, golden)
    assert [(a.module, a.group, a.stage) for a in found] == [("fc1", "grad_unreduced", "backward")]


def test_a_nan_in_the_target_only_is_made_where_it_appears():
    target = model_rows(3)
    at = target.name.index("act.output")
    target.values[at, target.ops.index("max")] = math.nan
    target.values[at, target.ops.index("nans")] = 1
    found = divergences(target, model_rows(3))
    assert [(a.module, a.name) for a in found] == [("act", "act.output")]


def test_data_that_differs_enters_at_the_models_input():
    target = model_rows(3)
    at = target.name.index("fc1.input")
    target.values[at] *= 2
    found = divergences(target, model_rows(3))
    assert [(a.name, a.module) for a in found] == [("fc1.input", "")]
    assert "enters here" in found[0].message


def test_the_watch_reads_the_golden_one_step_at_a_time(tmp_path):
    writer = RunWriter(str(tmp_path), 0, ("min", "max", "mean", "norm", "zeros", "nans", "infs"), ndigits=6)
    for step in range(6):
        writer.write(model_rows(step))
    writer.close()
    watch = GoldenWatch(str(tmp_path), 0)
    assert [watch.check(model_rows(s)) for s in range(3)] == [[], [], []]
    found = watch.check(model_rows(3, fc2_scale=1.3))
    assert [(a.step, a.module) for a in found] == [(3, "fc2")]
    # a step the golden lacks, and a rank it lacks, have nothing to compare
    assert watch.check(model_rows(10, fc2_scale=9)) == []
    assert GoldenWatch(str(tmp_path), 1).check(model_rows(0, fc2_scale=9)) == []


def test_a_golden_written_with_six_decimals_matches_the_exact_target(tmp_path):
    """The CSVs round to ndigits decimals (the reference's 6): the exact target's statistics within one quantum of
    the golden's are the same number, and tiny statistics (a few quanta) are not compared: an output of magnitude
    2.5e-5 would otherwise differ by 2 % of itself (beyond a module's rounding allowance) where its inputs agree."""
    writer = RunWriter(str(tmp_path), 0, ("min", "max", "mean", "norm"), ndigits=6)
    targets = []
    for step in range(3):
        target = model_rows(step)
        out = target.name.index("fc2.output")
        target.values[out, :4] = [-1.4999e-5, 1.4999e-5, 1.4999e-6, 2.4999e-5]   # each 0.5e-6 (2 %) off
        small = target.name.index("fc1.weight", target.group.index("grad_unreduced"))
        target.values[small, :4] = [1.4e-6, 2.6e-6, 2e-6, 3.1e-6]
        writer.write(target)
        targets.append(target)
    writer.close()
    watch = GoldenWatch(str(tmp_path), 0)
    assert [watch.check(rec) for rec in targets] == [[], [], []]


@pytest.mark.parametrize("missing", ["target", "golden"])
def test_runs_without_weights_are_flagged(missing):
    target, golden = model_rows(1), model_rows(1)
    bare = target if missing == "target" else golden
    keep = [i for i, g in enumerate(bare.group) if g != "param_origin"]
    for field in ("group", "name", "module", "stage", "micro_step", "call", "vpp_stage", "shape", "dtype"):
        setattr(bare, field, [getattr(bare, field)[i] for i in keep])
    bare.values, bare.present = bare.values[keep], bare.present[keep]

    class Watch(GoldenWatch):
        def _golden_at(self, step):
            return golden
    watch = Watch("unused", 0)
    assert watch.check(target) == [] and watch.missing_weights


def test_each_call_of_a_module_called_twice_is_judged_with_its_weights():
    """`shared[1]` is the second call of `shared` in a micro-step (its rows' module is `shared`): both calls read
    shared's weights."""
    def rows(step, second=1.0, weight=1.0):
        return records(step, [
            row("param_origin", "shared.weight", norm=2.0 * weight, mean=0.01 * weight, shape=(4, 4), module="shared"),
            row("actv", "shared.input", norm=3.0, mean=0.3, shape=(2, 4), module="shared"),
            row("actv", "shared.output", norm=6.0 * weight, mean=0.6 * weight, shape=(2, 4), module="shared"),
            row("actv", "shared[1].input", norm=5.0, mean=0.5, shape=(2, 4), module="shared"),
            row("actv", "shared[1].output", norm=12.0 * weight * second, mean=1.2 * weight, shape=(2, 4),
                module="shared"),
            row("param_updated", "shared.weight", norm=2.0 * weight, mean=0.01 * weight, shape=(4, 4),
                module="shared")])
    found = divergences(rows(0, second=1.5), rows(0))
    assert [(a.name, a.module) for a in found] == [("shared[1].output", "shared")]
    # weights 5 % apart since the step before carry their difference into both calls' outputs
    assert divergences(rows(1, weight=1.05), rows(1), previous=(rows(0, weight=1.05), rows(0))) == []
