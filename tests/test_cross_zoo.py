"""The MindSpore/PyTorch twin zoo (issue 32): a transformer block, a CNN with BatchNorm and an MLP with LayerNorm
written in both frameworks with identical weights, dumped by our two collectors (tests/fixtures/cross_zoo/make.py,
packed in tests/fixtures/cross_zoo.tar.gz), a clean MindSpore run and one planted bug per case, compared with the
built-in mappings (-am, no yaml): the clean pairs raise no warning or error, and the compare's culprit (which the
advisor, -da and the graph read) names the planted op."""

from __future__ import annotations

import sys
import tarfile

import pytest

import msprobe

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "cross_zoo"))
from make import CASES, LEVELS  # noqa: E402

# MindSpore's nn.Dense is Shape, Reshape, MatMul and BiasAdd at L1, PyTorch's one linear: a dropped bias shows only
# where the cell is dumped (mix); PyTorch's collector dumps no split, so the split's gradient shows only at the
# cells it reaches (mix)
NOT_AT_L1 = {"block_no_bias", "mlp_no_bias", "block_split"}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross_zoo")
    with tarfile.open(FIXTURES / "cross_zoo.tar.gz") as tar:
        tar.extractall(root, filter="data")
    return root


def compared(zoo, case: str, level: str):
    model, variant, _, _ = CASES[case]
    target = zoo / f"ms_{case}_{level}" / "dump.json"
    golden = zoo / f"pt_{model}_{variant}_{level}" / "dump.json"
    return msprobe.compare(target, golden, api_mapping=True), msprobe.diff_analyze(target, golden, api_mapping=True)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", [c for c, v in CASES.items() if v[2] is None])
def test_a_clean_twin_raises_no_alarm(zoo, case, level):
    result, analysis = compared(zoo, case, level)
    assert result.summary.counts["warning"] == result.summary.counts["error"] == 0
    assert result.summary.first_error is None and analysis.culprit["op_name"] is None


def test_the_planted_bugs_are_named(zoo):
    named, missed = [], []
    for case, (_, _, bug, want) in CASES.items():
        if bug is None:
            continue
        for level in LEVELS:
            result, analysis = compared(zoo, case, level)
            culprit = result.summary.first_error
            if level == "L1" and case in NOT_AT_L1:
                continue
            if culprit is not None and want in culprit:
                assert culprit.startswith(analysis.culprit["op_name"])      # -da reads the same verdict
                named.append((case, level))
            else:
                missed.append((case, level, culprit))
    assert not missed, missed
    assert len(named) == 2 * 11 - len(NOT_AT_L1)


def test_the_eps_of_a_layer_norm_is_introduced_at_its_row(zoo):
    """The issue's missed bug: an identical input (its statistics written by two collectors) and a LayerNorm whose
    eps is 0.3: the output row is `introduced` there, not `inherited` from its input."""
    result, _ = compared(zoo, "mlp_eps", "L1")
    rows = {row["NPU Name"]: row for row in result.rows}
    norm_in = rows["Primitive.layer_norm.LayerNorm.0.forward.input.0"]
    assert norm_in["Bench Name"] == "Functional.layer_norm.0.forward.input.0"
    assert norm_in["NPU l2norm"] == norm_in["Bench l2norm"]          # one statistics convention in both collectors
    out = rows["Primitive.layer_norm.LayerNorm.0.forward.output.0"]
    assert out["Error_Origin"] == "introduced" and out["Result"] != "pass"
    rows = {row["NPU Name"]: row for row in compared(zoo, "mlp_eps", "mix")[0].rows}
    assert rows["Cell.ln.LayerNorm.parameters_grad.0.gamma"]["Bench Name"] == \
        "Module.ln.LayerNorm.parameters_grad.0.weight"
    assert rows["Cell.ln.LayerNorm.forward.0.output.0"]["Result"] != "pass"


def test_matched_rows(zoo):
    """The rows the golden collector records too are matched: every Cell row of a mix dump, the norms, embedding,
    activations, softmax, losses and elementwise functions; MindSpore's own primitives (Shape, Reshape, MatMul and
    BiasAdd of nn.Dense) and the casts and reshapes PyTorch's collector does not dump stay N/A, each with its
    reason."""
    for model, variant in (("block", "clean"), ("cnn", "clean"), ("mlp", "clean")):
        result, _ = compared(zoo, f"{model}_{variant}", "mix")
        rows = result.rows
        cells = [r for r in rows if r["NPU Name"].startswith("Cell.")]
        assert sum(r["Bench Name"] != "N/A" for r in cells) >= 0.9 * len(cells), model
        for row in rows:
            if row["Bench Name"] == "N/A":
                assert "not compared" in row["Err_message"]
    notes = {r["NPU Name"]: r["Err_message"] for r in compared(zoo, "block_clean", "L1")[0].rows}
    assert "the golden run records no permute call" in notes["Tensor.permute.0.forward.input.0"]
    assert "a MindSpore primitive that no PyTorch op" in notes["Primitive.matmul.MatMul.0.forward.output.0"]
    assert "LayerNorm's mean and rstd" in notes["Primitive.layer_norm.LayerNorm.0.forward.output.1"]


def test_statistics_written_by_another_collector_are_equal_up_to_their_rounding(zoo, tmp_path):
    """The golden dumped by a collector that reduces in float32 (the reference's): the same input's Norm and Mean
    one or two float32 units apart. The input still counts as identical, and the LayerNorm with eps 0.3 is still
    `introduced` at its own row."""
    import json

    import numpy as np

    golden = json.loads((zoo / "pt_mlp_plain_L1" / "dump.json").read_text())
    arg = golden["data"]["Functional.layer_norm.0.forward"]["input_args"][0]
    for key, units in (("Norm", 1), ("Mean", -2)):
        value = np.float32(arg[key])
        for _ in range(abs(units)):
            value = np.nextafter(value, np.float32(np.inf if units > 0 else -np.inf))
        arg[key] = float(value)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "dump.json").write_text(json.dumps(golden))
    target = zoo / "ms_mlp_eps_L1" / "dump.json"
    rows = {r["NPU Name"]: r for r in msprobe.compare(target, tmp_path / "g" / "dump.json", api_mapping=True).rows}
    assert rows["Primitive.layer_norm.LayerNorm.0.forward.input.0"]["NPU l2norm"] != \
        rows["Primitive.layer_norm.LayerNorm.0.forward.input.0"]["Bench l2norm"]
    assert rows["Primitive.layer_norm.LayerNorm.0.forward.output.0"]["Error_Origin"] == "introduced"


def test_the_layer_mapping_names_them_too(zoo):
    """-lm without a yaml (mix): the clean pairs stay calm and the planted op is named, except the float16 dense
    and conv, which the MindSpore models call from their own construct where PyTorch calls a child module: by place
    they have no partner (-am pairs them by call count)."""
    by_place = {"block_fp16_dense", "cnn_fp16_conv"}
    for case, (model, variant, bug, want) in CASES.items():
        result = msprobe.compare(zoo / f"ms_{case}_mix" / "dump.json", zoo / f"pt_{model}_{variant}_mix" / "dump.json",
                                 layer_mapping=True)
        culprit = result.summary.first_error
        if bug is None:
            assert result.summary.counts["warning"] == result.summary.counts["error"] == 0, case
        elif case not in by_place:
            assert culprit is not None and want in culprit, (case, culprit)
