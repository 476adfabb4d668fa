"""An op the golden run does not call (compare/verdict.py MSG_EXTRA_OP): the target scales a GELU's output by 1.02,
an op the golden has no partner for; the compare leaves it unmatched and had named only what it changes downstream
(the enclosing module's output, as a hidden cast). The verdict names the unmatched op whose output is the first
tensor the runs differ on, and -da, the advisor and msprobe triage read that one culprit (triage used to re-target
it with a rule of its own)."""

from __future__ import annotations

import json

import pytest

from conftest import only_file, run_cli

MODULE = "Module.head.Head.forward.0"


def tensor(norm, mx=1.5, shape=(4, 8), dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": mx, "Min": -mx / 3,
            "Mean": norm / 20, "Norm": norm, "requires_grad": False}


def write_pair(folder, extra=True, cross_feed=False, between=False):
    """golden: linear -> gelu -> linear inside one module; target: gelu's output times 1.02 (an unmatched
    Tensor.__mul__) before the last linear. cross_feed: the extra op's output is not what the last linear reads;
    between: both runs call an op on another tensor before the last linear (a BatchNorm's num_batches_tracked
    += 1)."""
    x, w, b = tensor(8.0, 2.0), tensor(2.3, 0.5, (8, 8)), tensor(0.5, 0.3, (8,))
    hidden, gelu = tensor(3.4, 2.2), tensor(1.68, 2.1)
    scaled = tensor(1.71, 2.142)
    for side in ("target", "golden"):
        fed = scaled if side == "target" and extra and not cross_feed else gelu
        out = tensor(0.8952, 0.9) if side == "target" and extra else tensor(0.8925, 0.897)
        data = {"Functional.linear.0.forward": {"input_args": [x, w, b], "input_kwargs": {}, "output": [hidden]},
                "Functional.gelu.0.forward": {"input_args": [hidden], "input_kwargs": {}, "output": [gelu]}}
        construct = {"Functional.linear.0.forward": MODULE, "Functional.gelu.0.forward": MODULE, MODULE: None}
        if side == "target" and extra:
            data["Tensor.__mul__.0.forward"] = {
                "input_args": [gelu, {"type": "float", "value": 1.02}], "input_kwargs": {},
                "output": [tensor(1.5, 2.142) if cross_feed else scaled]}
            construct["Tensor.__mul__.0.forward"] = MODULE
        if between:
            count = {"type": "torch.Tensor", "dtype": "torch.int64", "shape": [], "Max": 3, "Min": 3, "Mean": 3,
                     "Norm": 3, "requires_grad": False}
            data["Tensor.add_.0.forward"] = {"input_args": [count, {"type": "int", "value": 1}], "input_kwargs": {},
                                             "output": [dict(count, Max=4, Min=4, Mean=4, Norm=4)]}
            construct["Tensor.add_.0.forward"] = MODULE
        data["Functional.linear.1.forward"] = {"input_args": [fed, w, b], "input_kwargs": {}, "output": [out]}
        construct["Functional.linear.1.forward"] = MODULE
        data[MODULE] = {"input_args": [x], "input_kwargs": {}, "output": [out]}
        path = folder / side / "step0" / "rank0"
        path.mkdir(parents=True)
        (path / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": "pytorch",
                                                    "dump_data_dir": None, "data": data}))
        (path / "construct.json").write_text(json.dumps(construct))
    return (folder / "target" / "step0" / "rank0" / "dump.json", folder / "golden" / "step0" / "rank0" / "dump.json")


def test_the_unmatched_op_whose_output_is_the_first_difference_is_the_culprit(tmp_path, capsys):
    from msprobe import api
    from msprobe.compare.verdict import MSG_EXTRA_OP

    target, golden = write_pair(tmp_path)
    result = api.compare(str(target), str(golden))
    names, results = result.column("NPU Name"), result.column("Result")
    row = names.index("Tensor.__mul__.0.forward.output.0")
    assert results[row] == "warning" and MSG_EXTRA_OP in result.column("Err_message")[row]
    # the compare's culprit (the advisor's) is the extra op, not the module whose output it changes
    assert result.summary.first_error == "Tensor.__mul__.0.forward.output.0"
    assert "golden run does not" in result.summary.advice
    # -da reads the same culprit and writes the next dump for it, with its module
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-da"]) == 0
    found = json.loads(only_file(out, "diff_analyze_*.json").read_text())
    assert found["culprit"]["op_name"] == "Tensor.__mul__.0.forward"
    assert found["culprit"]["module"] == MODULE
    config = json.loads(only_file(out, "next_dump_*_target.json").read_text())
    assert config["task"] == "tensor" and config["step"] == [0]
    assert config["tensor"]["list"][:2] == ["Tensor.__mul__.0.forward", "Tensor.__mul__.0.backward"]
    # the first divergence is still the first matched op whose tensors differ
    assert found["rank_0"][0]["op_name"] == "Functional.linear.1.forward"


@pytest.mark.parametrize("case", ["no extra op", "its output feeds nothing that differs"])
def test_no_extra_op_culprit_without_an_unmatched_producer(tmp_path, case):
    """Without the extra op, or when the unmatched op's output is not the tensor that first differs (another
    dtype, shape or statistics), the rule names nothing of its own."""
    from msprobe import api
    from msprobe.compare.verdict import MSG_EXTRA_OP

    target, golden = write_pair(tmp_path, extra=case != "no extra op", cross_feed=True)
    result = api.compare(str(target), str(golden))
    assert not any(MSG_EXTRA_OP in text for text in result.column("Err_message"))
    assert result.summary.first_error != "Tensor.__mul__.0.forward.output.0"


def test_not_across_frameworks(tmp_path):
    """A MindSpore run records many ops a PyTorch run does not (casts, reshapes inside cells): across frameworks
    an unmatched op is never named by this rule."""
    from msprobe import api
    from msprobe.compare.verdict import MSG_EXTRA_OP

    target, golden = write_pair(tmp_path)
    content = json.loads(target.read_text())
    content["framework"] = "mindspore"
    target.write_text(json.dumps(content))
    result = api.compare(str(target), str(golden))
    assert not any(MSG_EXTRA_OP in text for text in result.column("Err_message"))


def test_triage_names_the_same_culprit_as_da(tmp_path):
    """msprobe triage reads -da's culprit and next dump (it re-targets nothing of its own): the same op, its module
    and a next dump that selects it."""
    import msprobe

    target, golden = write_pair(tmp_path)
    found = msprobe.triage(target_dump=str(target), golden_dump=str(golden), output_dir=str(tmp_path / "triage"))
    assert (found.culprit, found.module) == ("Tensor.__mul__.0.forward", MODULE)
    assert found.exit_code == 1


@pytest.mark.parametrize("between", [False, True])
def test_the_op_reading_the_extra_ops_output(tmp_path, between):
    """-da names the op that reads what the extra op makes (its input has the extra op's output statistics), in
    both runs, for the next dump: not an op called in between on another tensor (a BatchNorm's counter)."""
    from msprobe import api

    target, golden = write_pair(tmp_path, between=between)
    culprit = api.diff_analyze(str(target), str(golden)).culprit
    assert culprit["op_name"] == "Tensor.__mul__.0.forward"
    assert (culprit["reader"], culprit["golden_reader"]) == ("Functional.linear.1.forward",) * 2


def test_a_cast_that_makes_the_first_difference_is_the_culprit(tmp_path):
    """A cast no rule judges (Tensor.to, rules.ALL_IGNORE) paired with the golden's cast of the same index: the
    target casts to float16 where the golden stays float32, and the matmul reading it is the first row that
    differs; a later op's own-looking error (here a backward output) must not outrank the dtype change."""
    from msprobe import api
    from msprobe.compare.verdict import MSG_FIRST_CAST

    q = tensor(5.8, 2.0)
    for side in ("target", "golden"):
        dtype = "torch.float16" if side == "target" else "torch.float32"
        cast = tensor(5.8203 if side == "target" else 5.8, 2.0, dtype=dtype)
        scores = tensor(9.13 if side == "target" else 9.1, 3.0, (4, 4))
        grad = tensor(2.0, 1.0, (4, 4))
        data = {"Tensor.to.0.forward": {"input_args": [q, {"type": "torch.dtype", "value": dtype}],
                                        "input_kwargs": {}, "output": [cast]},
                "Torch.matmul.0.forward": {"input_args": [cast, q], "input_kwargs": {}, "output": [scores]},
                "Torch.matmul.0.backward": {"input": [grad], "output": [
                    tensor(3.0 if side == "target" else 2.0, 1.0), tensor(3.0, 1.0)]}}
        (tmp_path / side).mkdir()
        (tmp_path / side / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                               "framework": "pytorch", "dump_data_dir": None,
                                                               "data": data}))
    result = api.compare(str(tmp_path / "target" / "dump.json"), str(tmp_path / "golden" / "dump.json"))
    names = result.column("NPU Name")
    row = names.index("Tensor.to.0.forward.output.0")
    assert result.column("Result")[row] == "warning" and MSG_FIRST_CAST in result.column("Err_message")[row]
    assert result.summary.first_error == "Tensor.to.0.forward.output.0"
    assert "dtype" in result.summary.advice


def test_a_cast_the_golden_does_not_make_is_a_dtype_change(tmp_path):
    """An unmatched Tensor.to (`x.astype(float16)` in the target only) whose output, read by the next op, is the first
    tensor that differs: the dtype change is the cause (MSG_FIRST_CAST, not an extra op), -da's culprit cause is
    `precision`, and with nothing beyond the dtypes the triage answers `dtype` with no culprit."""
    import msprobe
    from msprobe import api
    from msprobe.compare.verdict import CAUSE_PRECISION, MSG_EXTRA_OP, MSG_FIRST_CAST

    q = tensor(5.8, 2.0)
    for side in ("target", "golden"):
        half = side == "target"
        cast = tensor(5.8008, 2.0, dtype="torch.float16")
        read = cast if half else q
        out = tensor(5.8008 if half else 5.8, 2.0, dtype="torch.float16" if half else "torch.float32")
        data = {"Functional.linear.0.forward": {"input_args": [tensor(1.0, 1.0)], "input_kwargs": {}, "output": [q]}}
        if half:
            data["Tensor.to.0.forward"] = {"input_args": [q, {"type": "torch.dtype", "value": "torch.float16"}],
                                           "input_kwargs": {}, "output": [cast]}
        data["Functional.relu.0.forward"] = {"input_args": [read], "input_kwargs": {}, "output": [out]}
        (tmp_path / side).mkdir()
        (tmp_path / side / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                               "framework": "pytorch", "dump_data_dir": None,
                                                               "data": data}))
    target, golden = str(tmp_path / "target" / "dump.json"), str(tmp_path / "golden" / "dump.json")
    result = api.compare(target, golden)
    row = result.column("NPU Name").index("Tensor.to.0.forward.output.0")
    message = result.column("Err_message")[row]
    assert MSG_FIRST_CAST in message and MSG_EXTRA_OP not in message
    assert "dtype" in result.summary.advice
    analysis = api.diff_analyze(target, golden)
    assert analysis.culprit["op_name"] == "Tensor.to.0.forward" and analysis.culprit["cause"] == CAUSE_PRECISION
    assert analysis.dtype_aware["op_name"] is None
    found = msprobe.triage(target_dump=target, golden_dump=golden, output_dir=str(tmp_path / "triage"))
    assert found.outcome == "dtype" and found.culprit is None and found.exit_code == 0
    assert found.dtype_change["op"] == "Tensor.to.0.forward"
    assert "passes float32 on to Functional.relu.0.forward" in found.dtype_change["dtypes"]
