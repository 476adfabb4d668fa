"""One verdict per row (issue 27, compare/verdict.py): rows with no data, below the noise floor or a framework
convention are not judged; rows made here are flagged; the culprit; the scale-aware relative error."""

from __future__ import annotations

import json
import math

import numpy as np

from msprobe.compare import rules, verdict
from msprobe.compare.pipeline import CompareOptions, compare_dumps
from msprobe.dump.reader import Dump


def dump(data, framework="pytorch"):
    return Dump(path="/nonexistent/dump.json", task="statistics", level="mix", framework=framework, data=data,
                is_debug=False)


def stat(mx=1.0, mn=-1.0, mean=0.1, norm=2.0, dtype="torch.float32", shape=(4,)):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm}


def judged(target, golden, target_framework="pytorch", golden_framework="pytorch"):
    table, summary = compare_dumps(dump(target, target_framework), dump(golden, golden_framework),
                                   CompareOptions(write_output=False))
    cells = table.cells
    out = {name: (result, json.loads(message), origin) for name, result, message, origin in
           zip(cells["NPU Name"], cells["Result"], cells["Err_message"], cells["Error_Origin"])}
    return out, summary


def backward(name, inputs, outputs):
    return {name: {"input": inputs, "output": outputs}}


def forward(name, inputs, outputs):
    return {name: {"input_args": inputs, "input_kwargs": {}, "output": outputs}}


def test_a_row_without_data_is_not_flagged_and_says_why():
    """The gradient of an input that does not require one is null in both runs: the group rule that fires on the
    entry flags the first output with data, the null row gets a note and no Error_Origin."""
    name = "Functional.conv2d.0.backward"
    target = backward(name, [stat()], [None, stat(norm=3.0)])
    golden = backward(name, [stat()], [None, stat(norm=2.0)])
    out, _ = judged(target, golden)
    assert out[f"{name}.output.0"] == ("pass", ["note: not compared: neither run records a tensor here (null)."], "")
    result, messages, origin = out[f"{name}.output.1"]
    assert result == "warning" and rules.MSG_NORM_TEN_TIMES in messages and origin == "introduced"


def test_a_gradient_at_the_rounding_floor_of_its_inputs_is_noise():
    """A bias gradient summed to ~0 (BatchNorm after the conv): 1e-7 against an incoming gradient of 2 is within 16
    units of float32 rounding in both runs; its 100 % norm difference is rounding, not an error."""
    name = "Functional.conv2d.0.backward"
    target = backward(name, [stat()], [stat(norm=1.5), stat(mx=1e-8, mn=-1e-8, mean=1e-9, norm=2e-7)])
    golden = backward(name, [stat()], [stat(norm=1.5), stat(mx=2e-8, mn=-1e-8, mean=-1e-9, norm=1e-7)])
    out, summary = judged(target, golden)
    result, messages, origin = out[f"{name}.output.1"]
    assert result == "pass" and origin == ""
    assert messages == [verdict.NOTE_NOISE.format(neighbour=f"{name}.input.0", norm=1e-7, units=16, reference=2.0)]
    assert summary.results == {"pass": 3}
    # a forward op that maps large inputs to small outputs by design (a softmax) is not noise
    out, _ = judged(forward("Functional.softmax.0.forward", [stat(norm=1e10)], [stat(norm=3.0)]),
                    forward("Functional.softmax.0.forward", [stat(norm=1e10)], [stat(norm=3.1)]))
    assert "note" not in json.dumps(out)


def test_integer_widths_of_two_frameworks_with_equal_values():
    name = "Functional.cross_entropy.0.forward"
    labels_ms = stat(31.0, 5.0, 20.1875, 86.9, dtype="Int32", shape=(16,))
    labels_pt = stat(31, 5, None, None, dtype="torch.int64", shape=(16,))
    out, _ = judged(forward(name, [stat(), labels_ms], [stat()]), forward(name, [stat(), labels_pt], [stat()]),
                    "mindspore")
    assert out[f"{name}.input.1"][:2] == ("pass", ["note: int32 vs int64, values equal (a framework convention)."])
    labels_pt["Max"] = 30
    out, _ = judged(forward(name, [stat(), labels_ms], [stat()]), forward(name, [stat(), labels_pt], [stat()]),
                    "mindspore")
    assert out[f"{name}.input.1"][:2] == ("error", [rules.MSG_DTYPE])


def test_a_reshape_across_frameworks_is_compared_by_value():
    name = "Mint.matmul.0.forward"
    ms = forward(name, [stat(shape=(2, 2, 8, 8))], [stat(shape=(2, 2, 8, 8))])
    out, _ = judged(ms, forward(name, [stat(shape=(4, 8, 8))], [stat(shape=(2, 2, 8, 8))]), "mindspore")
    assert out[f"{name}.input.0"][:2] == ("pass", [verdict.NOTE_RESHAPE.format(target="[2, 2, 8, 8]",
                                                                               golden="[4, 8, 8]")])
    out, _ = judged(ms, forward(name, [stat(shape=(2, 8, 8))], [stat(shape=(2, 2, 8, 8))]), "mindspore")
    assert out[f"{name}.input.0"][:2] == ("error", [rules.MSG_SHAPE])
    out, _ = judged(ms, forward(name, [stat(shape=(4, 8, 8))], [stat(shape=(2, 2, 8, 8))]))      # one framework
    assert out[f"{name}.input.0"][:2] == ("error", [rules.MSG_SHAPE, verdict.MSG_PARTED])      # the runs part


def test_a_recording_convention_across_frameworks_is_not_judged():
    """The target's gradient reaches the next backward op unchanged, the golden's does not (PyTorch records the
    gradient at an API's last autograd node): a note, never introduced."""
    incoming, passed_on, inner = stat(norm=1.0), stat(mx=0.3, mn=-0.2, mean=0.01, norm=0.5), stat(norm=0.25)
    target = {**backward("Functional.cross_entropy.0.backward", [incoming], [passed_on]),
              **backward("Functional.linear.8.backward", [passed_on], [stat(norm=0.7)])}
    golden = {**backward("Functional.cross_entropy.0.backward", [incoming], [inner]),
              **backward("Functional.linear.8.backward", [passed_on], [stat(norm=0.7)])}
    out, summary = judged(target, golden, "mindspore")
    result, messages, origin = out["Functional.cross_entropy.0.backward.output.0"]
    assert (result, origin) == ("pass", "")
    assert messages == [verdict.NOTE_RECORDING.format(passes="NPU", consumer="Functional.linear.8.backward",
                                                      other="Bench's")]
    assert summary.advice.row is None
    out, _ = judged(target, golden)            # one framework: a real difference, made here
    assert out["Functional.cross_entropy.0.backward.output.0"][2] == "introduced"


def test_a_module_with_identical_inputs_and_a_hidden_cast_warns():
    name = "Module.fc.Linear.forward.0"
    target = forward(name, [stat()], [stat(mx=1.001, norm=2.002)])
    out, summary = judged(target, forward(name, [stat()], [stat()]))
    assert out[f"{name}.output.0"] == ("warning", [verdict.MSG_HIDDEN_CAST], "dtype")
    assert summary.first_error == f"{name}.output.0"
    # the same output behind inputs that differ already: carried, no warning of its own; the input, the first
    # item that differs, is where the difference enters
    out, summary = judged(forward(name, [stat(mx=1.01)], [stat(mx=1.01, norm=2.02)]),
                          forward(name, [stat()], [stat()]))
    assert out[f"{name}.output.0"][0] == "pass" and summary.first_error == f"{name}.input.0"
    assert out[f"{name}.input.0"] == ("warning", [verdict.MSG_ENTERS], "")


def test_levels_and_the_culprit():
    states = ["input", "output", "output", "output", "output", "output"]
    results = ["error", "error", "warning", "error", "warning", "pass"]
    messages = [json.dumps([rules.MSG_DTYPE])] * 2 + ["[]", json.dumps([rules.MSG_SHAPE]),
                                                        json.dumps([verdict.MSG_INTRODUCED]), "[]"]
    origins = ["", "dtype", "inherited", "inherited", "introduced", "inherited"]
    levels = verdict.row_levels(states, results, messages, origins).tolist()
    assert levels == [verdict.CARRIED_ISSUE, verdict.PRECISION_HERE, verdict.CARRIED_ISSUE, verdict.CARRIED_ISSUE,
                      verdict.MADE_HERE, verdict.CARRIED]
    assert verdict.culprit_of(np.asarray(levels)) == 4               # introduced outranks the earlier dtype error
    assert verdict.culprit_of(np.asarray(levels[:4])) == 1           # else where the precision drops
    assert verdict.culprit_of(np.asarray([verdict.CARRIED_ISSUE, verdict.CARRIED])) is None


def test_scale_aware_errors():
    """A statistic that is ~0 by cancellation cannot give a large relative error; one above its floor keeps its own
    relative error."""
    cells = {"NPU Dtype": ["torch.float32"] * 3, "Bench Dtype": ["torch.float32"] * 3,
             "NPU max": [1.0, 1.0, 2.0], "Bench max": [1.0, 1.0, 2.0], "NPU min": [-1.0, -1.0, -2.0],
             "Bench min": [-1.0, -1.0, -2.0], "NPU mean": [3e-13, 0.6, None], "Bench mean": [1e-13, 0.5, None],
             "NPU l2norm": [2.0, 2.0, 4.0], "Bench l2norm": [2.0, 2.0, 4.0]}
    errors = verdict.scale_errors("statistics", cells)
    floor = verdict.STAT_FLOOR_UNITS * 2 ** -23
    assert math.isclose(errors[0], 2e-13 / floor) and errors[0] < 1e-5
    assert math.isclose(errors[1], 0.2) and errors[2] == 0
    assert verdict.describe_magnitude(4.2e-7) == "4.2e-07" and verdict.describe_magnitude(0.5073) == "0.507"


def test_a_debug_save_can_be_the_culprit():
    """A debug.json save has no op around it: its own error (a dtype here) is made there."""
    def debug(dtype):
        return Dump(path="/nonexistent/debug.json", task="statistics", level="debug", framework="pytorch",
                    data={"x.0.debug": stat(dtype=dtype), "y.0.debug": stat()}, is_debug=True)
    table, summary = compare_dumps(debug("torch.bfloat16"), debug("torch.float32"), CompareOptions(write_output=False))
    assert table.cells["Result"] == ["error", "pass"] and summary.first_error == "x.0.debug"


def test_a_perturbed_parameter_is_where_the_difference_enters():
    """A ResNet whose target has one conv's weight 1 % off (probed): at mix and L0 the module's parameter row is the
    culprit (no op of the step makes a parameter), the conv's output is inherited from it; a weight within rounding
    (a later step of twin runs) is not flagged."""
    name = "Module.layer2.conv2.Conv2d.forward.0"

    def conv(weight):
        return {name: {"input_args": [stat(mx=3.0, mn=0.0, mean=0.4, norm=33.8)], "input_kwargs": {},
                       "output": [stat(mx=1.1, mn=-1.4, mean=-0.009, norm=16.5)], "parameters": {"weight": weight}}}
    golden_weight = stat(mx=0.0833, mn=-0.0833, mean=-0.00024, norm=2.2518)
    out, summary = judged(conv(stat(mx=0.0841, mn=-0.0842, mean=-0.00024, norm=2.2743)), conv(golden_weight))
    assert out[f"{name}.parameters.weight"] == ("warning", [verdict.MSG_PARAMETER], "")
    assert summary.first_error == f"{name}.parameters.weight"
    out, summary = judged(conv(stat(mx=0.08330001, mn=-0.0833, mean=-0.00024, norm=2.2518)), conv(golden_weight))
    assert out[f"{name}.parameters.weight"] == ("pass", [], "") and summary.first_error is None



def test_an_input_where_the_difference_enters():
    """Level L1 (a ResNet with one conv weight 1 % off, probed): the conv's weight input is the first item that
    differs; no dumped op made it, so the difference enters there. Not when a row before it has no partner (it may
    come from that op), nor when a dumped parameter differs (mix, L0: its row names the weight); where parameters
    are dumped and none differs, the input enters all the same (the data, a buffer, a tensor the model's code
    builds, a weight of the top-level model, which no module entry records)."""
    name = "Functional.conv2d.4.forward"
    weight = stat(mx=0.0841, mn=-0.0842, mean=-0.00024, norm=2.2743)
    golden_weight = stat(mx=0.0833, mn=-0.0833, mean=-0.00024, norm=2.2518)
    before = forward("Functional.relu.0.forward", [stat()], [stat()])
    out, summary = judged({**before, **forward(name, [stat(), weight], [stat(norm=2.02)])},
                          {**before, **forward(name, [stat(), golden_weight], [stat()])})
    assert out[f"{name}.input.1"] == ("warning", [verdict.MSG_ENTERS], "")
    assert summary.first_error == f"{name}.input.1"
    extra = forward("Functional.relu.9.forward", [stat()], [stat()])
    out, _ = judged({**extra, **forward(name, [stat(), weight], [stat(norm=2.02)])},
                    forward(name, [stat(), golden_weight], [stat()]))
    assert out[f"{name}.input.1"][0] == "pass"
    def module(parameter):
        return {"Module.conv.Conv2d.forward.0": {"input_args": [stat()], "input_kwargs": {}, "output": [stat()],
                                                 "parameters": {"weight": parameter}}}
    out, summary = judged({**forward(name, [stat(), weight], [stat(norm=2.02)]), **module(golden_weight)},
                          {**forward(name, [stat(), golden_weight], [stat()]), **module(golden_weight)})
    assert out[f"{name}.input.1"] == ("warning", [verdict.MSG_ENTERS], "")
    out, summary = judged({**forward(name, [stat(), weight], [stat(norm=2.02)]), **module(weight)},
                          {**forward(name, [stat(), golden_weight], [stat()]), **module(golden_weight)})
    assert out[f"{name}.input.1"][0] == "pass"
    assert summary.first_error == "Module.conv.Conv2d.forward.0.parameters.weight"


def test_a_non_tensor_argument_one_framework_records_is_a_convention(tmp_path):
    """A collective's group name that MindSpore records and PyTorch writes null (the reference's own -lm fixture)
    is a recording convention: pass and not compared, not an error beside the note "not compared"."""
    name = "Distributed.all_reduce.0.forward"
    group = {"type": "str", "value": "tp-0-1-2-3"}
    ms = {name: {"input_args": [stat(dtype="Float32")], "input_kwargs": {"group": group},
                 "output": [stat(dtype="Float32")]}}
    pt = {name: {"input_args": [stat()], "input_kwargs": {"group": None}, "output": [stat()]}}
    from msprobe.compare.mapping import MappingOptions

    pairs = tmp_path / "data_mapping.yaml"      # as the reference's -lm fixture pairs them
    pairs.write_text(f"{name}.input.group: {name}.input.group\n")
    table, _ = compare_dumps(dump(ms, "mindspore"), dump(pt), CompareOptions(write_output=False,
                                                                            mapping=MappingOptions(data=str(pairs))))
    cells = table.cells
    row = cells["NPU Name"].index(f"{name}.input.group")
    assert (cells["Result"][row], json.loads(cells["Err_message"][row])) == (
        "pass", ["note: not compared: the Bench records no tensor here (null)."])


def test_the_auxiliary_outputs_of_mindspores_batchnorm_are_not_judged():
    """MindSpore's BatchNorm primitive returns the normalised tensor and four auxiliary tensors (saved statistics or
    workspace) that its CPU kernel leaves unwritten in inference and aliases to the moving statistics in training:
    two clean runs record other values there. They are noted, not judged; the normalised output is. (The same for
    LayerNorm's saved mean and variance and LSTM's workspaces, whose shape depends on the dtype.)"""
    name = "Primitive.bn_train.BatchNorm.0.forward"
    f32 = "Float32"

    def bn(saved, out=None):
        out = stat(dtype=f32, shape=(4, 16)) if out is None else out
        aux = stat(mx=saved, mn=0.0, mean=saved / 2, norm=saved, dtype=f32, shape=(16,))
        return forward(name, [stat(dtype=f32, shape=(4, 16))], [out, aux, aux, stat(dtype=f32, shape=(16,)),
                                                                 stat(dtype=f32, shape=(16,))])
    out, summary = judged(bn(0.02), bn(0.0), "mindspore", "mindspore")
    assert out[f"{name}.output.1"][0] == "pass" and "auxiliary output" in " ".join(out[f"{name}.output.1"][1])
    assert summary.first_error is None
    out, summary = judged(bn(0.02, stat(mx=1.5, dtype=f32, shape=(4, 16))), bn(0.0), "mindspore", "mindspore")
    assert summary.first_error == f"{name}.output.0"
    lstm = "Primitive.LSTM.LSTM.0.forward"

    def recurrent(workspace, dtype):
        outs = [stat(dtype=dtype, shape=(4, 8))] * 3 + [stat(dtype=dtype, shape=workspace)] * 2
        return forward(lstm, [stat(dtype=dtype, shape=(4, 8))], outs)
    out, summary = judged(recurrent((96,), "Float16"), recurrent((48,), "Float32"), "mindspore", "mindspore")
    assert "auxiliary output" in " ".join(out[f"{lstm}.output.3"][1])
    assert out[f"{lstm}.output.3"][0] != "error"            # no shape error on a workspace
    assert not any(verdict.MSG_PARTED in " ".join(messages) for _result, messages, _origin in out.values())
