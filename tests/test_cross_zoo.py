"""The MindSpore/PyTorch twin zoo (issue 32): a transformer block, a CNN with BatchNorm, an MLP with LayerNorm, a
CNN with in-place ReLUs and padded pools, an LSTM and a masked attention, written in both frameworks with identical weights, dumped by our two collectors (tests/fixtures/cross_zoo/make.py,
packed in tests/fixtures/cross_zoo.tar.gz), a clean MindSpore run and one planted bug per case, compared with the
built-in mappings (-am, no yaml): the clean pairs raise no warning or error, and the compare's culprit (which the
advisor, -da and the graph read) names the planted op."""

from __future__ import annotations

import re
import sys
import tarfile

import pytest

import msprobe

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "cross_zoo"))
from make import CASES, LEVELS  # noqa: E402

# PyTorch's collector dumps no split, so the split's gradient shows only at the cells it reaches (mix); at L1
# MindSpore's nn.LSTM is its Primitive.LSTM.LSTM (made inside the cell's construct), paired with Torch.lstm for x,
# h0, c0 and the outputs, but its weights, flattened into one tensor, have no counterpart: its output's difference
# may come from them (inherited) and no row is the culprit; at mix its cell is (test_an_lstm_pairs_with_torch_lstm)
NOT_AT_L1 = {"block_split", "lstm_gate_order", "lstm_no_bias"}
# the models whose golden cross_zoo_all.tar.gz holds (dumped at risk_level ALL)
ALL_MODELS = ("block", "cnn", "mlp")
# A mask added as -1e9 (scores + mask * -1e9) transposed: the sum's Norm and Mean are the mask's (~1e9), only its
# Max moves (0.41 to 1.29): the statistics verdict judges the sum a pass and the softmax after it inherited
STATS_BLIND = {"attn_additive_transposed"}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("cross_zoo")
    with tarfile.open(FIXTURES / "cross_zoo.tar.gz") as tar:
        tar.extractall(root, filter="data")
    with tarfile.open(FIXTURES / "cross_zoo_all.tar.gz") as tar:     # the golden dumped at risk_level ALL
        tar.extractall(root, filter="data")
    return root


def compared(zoo, case: str, level: str, risk: str = ""):
    model, variant, _, _ = CASES[case]
    target = zoo / f"ms_{case}_{level}" / "dump.json"
    golden = zoo / f"pt_{model}_{variant}{risk}_{level}" / "dump.json"
    return msprobe.compare(target, golden, api_mapping=True), msprobe.diff_analyze(target, golden, api_mapping=True)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("case", "risk"), [(c, "") for c, v in CASES.items() if v[2] is None] +
                         [(c, "_all") for c, v in CASES.items() if v[2] is None and v[0] in ALL_MODELS])
def test_a_clean_twin_raises_no_alarm(zoo, case, level, risk):
    """Also against a golden dumped at risk_level ALL: the casts, reshapes, permutes and Dense's Reshape/Shape
    primitives now paired are calm (a dtype argument Float32 against torch.float32 and equal shape arguments pass;
    a cast of LayerNorm's gamma that MindSpore makes and PyTorch does not was paired with the model's own cast by
    call count: 2 false shape errors)."""
    result, analysis = compared(zoo, case, level, risk)
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
            if level == "L1" and case in NOT_AT_L1 or case in STATS_BLIND:
                continue
            if culprit is not None and want in culprit:
                assert culprit.startswith(analysis.culprit["op_name"])      # -da reads the same verdict
                named.append((case, level))
            else:
                missed.append((case, level, culprit))
    assert not missed, missed
    assert len(named) == 2 * sum(v[2] is not None for v in CASES.values()) - len(NOT_AT_L1) - 2 * len(STATS_BLIND) \
        == 37


@pytest.mark.xfail(strict=True, reason="statistics sensitivity: an output whose Max moves from identical inputs "
                                       "while its Norm is the -1e9 mask's is judged a pass (docs/cross_framework.md "
                                       "§11.1)")
@pytest.mark.parametrize("level", LEVELS)
def test_a_transposed_additive_mask_is_named(zoo, level):
    result, _ = compared(zoo, "attn_additive_transposed", level)
    assert result.summary.first_error is not None and "__add__" in result.summary.first_error


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


# rows, matched rows and rows whose op the golden collector records (the rest are recording conventions: MindSpore's
# Shape/Reshape primitives, the output of MatMul before BiasAdd, LayerNorm's mean and rstd, and the casts, reshapes
# and permutes that PyTorch's collector does not dump at its default risk level, as the reference's does not)
# Before the layout ops, nn.Dense's and nn.Embedding's reshapes and queries and nn.LayerNorm's casts were paired:
# block L1 104 of 410, mix 185 of 491,
# CNN 40 of 73 and 71 of 107, MLP 43 of 68 and 70 of 96; against a golden dumped at risk ALL 184, 265, 49, 80, 43, 70,
# with 2 false errors on the clean block (a cast of LayerNorm's gamma paired with the model's cast by call count).
MATCHED = {("block", "L1"): (410, 180, 184), ("block", "mix"): (491, 261, 265), ("cnn", "L1"): (73, 46, 47),
           ("cnn", "mix"): (107, 77, 78), ("mlp", "L1"): (68, 51, 52), ("mlp", "mix"): (96, 78, 79)}
# the golden dumped at risk_level ALL: the casts, reshapes and permutes have partners
MATCHED_ALL = {("block", "L1"): (410, 260, 278), ("block", "mix"): (491, 341, 359), ("cnn", "L1"): (73, 53, 54),
               ("cnn", "mix"): (107, 84, 85), ("mlp", "L1"): (68, 51, 52), ("mlp", "mix"): (96, 78, 79)}
# the twins added later (their golden is dumped at the default risk level only)
MATCHED.update({("pool", "L1"): (94, 49, 50), ("pool", "mix"): (134, 88, 89), ("lstm", "L1"): (137, 30, 31),
                ("lstm", "mix"): (177, 51, 52), ("attn", "L1"): (169, 98, 103), ("attn", "mix"): (201, 127, 132)})


@pytest.mark.parametrize("risk", ["", "_all"])
@pytest.mark.parametrize(("model", "level"), list(MATCHED))
def test_rows_with_a_counterpart_in_the_golden_recording_are_matched(zoo, model, level, risk):
    from msprobe.compare.mapping import UNMATCHED_OTHER

    if risk and model not in ALL_MODELS:
        pytest.skip(f"no golden of the {model} twin is dumped at risk_level ALL")

    rows = compared(zoo, f"{model}_clean", level, risk)[0].rows
    matched = sum(r["Bench Name"] != "N/A" for r in rows)
    other = sum(r["Bench Name"] == "N/A" and UNMATCHED_OTHER.split("{op}")[0] in r["Err_message"] for r in rows)
    assert (len(rows), matched, matched + other) == (MATCHED_ALL if risk else MATCHED)[model, level]
    assert matched >= 0.9 * (matched + other)


@pytest.mark.parametrize("level", LEVELS)
def test_an_lstm_pairs_with_torch_lstm(zoo, level):
    """MindSpore's nn.LSTM makes its ops.LSTM in its construct (Primitive.LSTM.LSTM, time major), PyTorch's records
    Torch.lstm(x, [h0, c0], [weights], ...): x, h0, c0, y, h_n, c_n and the gradient of y pair; the flat weights,
    the LSTM's two workspace outputs and the arguments' gradients are not compared. With the gates loaded in another
    order the LSTM's output is the first row that differs and -da names it as where the divergence starts, but the
    verdict's culprit stays none at L1 (its weights have no counterpart); at mix the cell is named."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "lstm_clean", level)[0].rows}
    lstm = "Primitive.LSTM.LSTM.0."
    pairs = {f"{lstm}{k}": "Torch.lstm.0." + v for k, v in
             {"forward.input.0": "forward.input.0", "forward.input.1": "forward.input.1.0",
              "forward.input.2": "forward.input.1.1", "forward.output.0": "forward.output.0",
              "forward.output.1": "forward.output.1", "forward.output.2": "forward.output.2",
              "backward.input.0": "backward.input.0"}.items()}
    assert {k: rows[k]["Bench Name"] for k in pairs} == pairs
    assert all(rows[k]["Result"] == "pass" for k in pairs)
    left = [f"{lstm}forward.input.3", f"{lstm}forward.output.3", f"{lstm}forward.output.4", f"{lstm}backward.output.0"]
    assert all(rows[k]["Bench Name"] == "N/A" and "not compared" in rows[k]["Err_message"] for k in left)
    result, analysis = compared(zoo, "lstm_gate_order", level)
    out = {r["NPU Name"]: r for r in result.rows}[f"{lstm}forward.output.0"]
    assert out["Result"] != "pass" and float(out["NormRelativeErr"].rstrip("%")) > 10
    assert analysis.op_name == f"{lstm}forward" if level == "L1" else analysis.culprit["op_name"] == \
        "Cell.lstm.LSTM.forward.0"


def test_a_dense_pairs_with_its_linear_call_by_call(zoo):
    """nn.Dense at L1 is MatMul + BiasAdd in MindSpore, Functional.linear in PyTorch: x, W, b, y and their gradients
    pair (W's with the gradient PyTorch's addmm records, of W transposed); MatMul's output before the bias has no
    counterpart. A model calling ops.dense where PyTorch calls its fifth Linear pairs with that call, not with the
    first linear by call count."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "mlp_clean", "L1")[0].rows}
    want = {"Primitive.matmul.MatMul.1.forward.input.0": "Functional.linear.1.forward.input.0",
            "Primitive.matmul.MatMul.1.forward.input.1": "Functional.linear.1.forward.input.1",
            "Primitive.bias_add.BiasAdd.1.forward.input.1": "Functional.linear.1.forward.input.2",
            "Primitive.bias_add.BiasAdd.1.forward.output.0": "Functional.linear.1.forward.output.0",
            "Primitive.bias_add.BiasAdd.1.backward.input.0": "Functional.linear.1.backward.input.0",
            "Primitive.bias_add.BiasAdd.1.backward.output.0": "Functional.linear.1.backward.output.0",
            "Primitive.matmul.MatMul.1.backward.output.0": "Functional.linear.1.backward.output.2",
            "Primitive.matmul.MatMul.1.backward.output.1": "Functional.linear.1.backward.output.1",
            "Primitive.matmul.MatMul.1.forward.output.0": "N/A", "Primitive.bias_add.BiasAdd.1.forward.input.0": "N/A"}
    assert {name: rows[name]["Bench Name"] for name in want} == want
    assert rows["Primitive.matmul.MatMul.1.backward.output.0"]["NPU Tensor Shape"] == "[4, 16]"
    rows = {r["NPU Name"]: r for r in compared(zoo, "block_fp16_dense", "L1")[0].rows}
    assert rows["Functional.dense.0.forward.output.0"]["Bench Name"] == "Functional.linear.4.forward.output.0"
    assert rows["Functional.dense.0.backward.output.0"]["Bench Name"] == "N/A"    # PyTorch: a flattened output's
    rows = {r["NPU Name"]: r for r in compared(zoo, "cnn_clean", "L1")[0].rows}
    assert rows["Primitive.bias_add.BiasAdd.0.forward.output.0"]["Bench Name"] == \
        "Functional.conv2d.0.forward.output.0"
    assert rows["Primitive.conv2d.Conv2D.0.backward.output.0"]["Bench Name"] == \
        "Functional.conv2d.0.backward.output.1"
    assert rows["Primitive.relu.ReLU.0.backward.output.0"]["Bench Name"] == "Functional.relu.0.backward.output.0"


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
    """-lm without a yaml (mix): the clean pairs stay calm and the planted op is named, the float16 dense and conv
    too, which the MindSpore models call from their own construct where PyTorch calls a child module: by place they
    have no partner; they pair as -am pairs them (a linear or conv call by call, with equal weight shapes)."""
    for case, (model, variant, bug, want) in CASES.items():
        result = msprobe.compare(zoo / f"ms_{case}_mix" / "dump.json", zoo / f"pt_{model}_{variant}_mix" / "dump.json",
                                 layer_mapping=True)
        culprit = result.summary.first_error
        if case in STATS_BLIND:
            continue
        if bug is None:
            assert result.summary.counts["warning"] == result.summary.counts["error"] == 0, case
        else:
            assert culprit is not None and want in culprit, (case, culprit)


def test_an_in_place_relu_and_the_padded_pools_pair_with_their_pytorch_calls(zoo):
    """MindSpore has no in-place relu: its ops.relu pairs with PyTorch's F.relu_ (Functional.relu_), call by call
    after nn.ReLU(inplace=True)'s F.relu. nn.AvgPool2d and nn.MaxPool2d with padding run MindSpore's 3-D
    primitives on the input unsqueezed to depth 1: they pair with avg_pool2d and max_pool2d item by item (the max
    pool's argmax has no partner), as the plain AvgPool primitive does; so a wrong count_include_pad is named at
    the pool."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "pool_clean", "L1")[0].rows}
    want = {"Primitive.relu.ReLU.0.forward.output.0": "Functional.relu.0.forward.output.0",
            "Functional.relu.0.forward.input.0": "Functional.relu_.0.forward.input.0",
            "Functional.relu.0.forward.output.0": "Functional.relu_.0.forward.output.0",
            "Primitive.max_pool.MaxPool3DWithArgmax.0.forward.input.0": "Functional.max_pool2d.0.forward.input.0",
            "Primitive.max_pool.MaxPool3DWithArgmax.0.forward.output.0": "Functional.max_pool2d.0.forward.output.0",
            "Primitive.max_pool.MaxPool3DWithArgmax.0.forward.output.1": "N/A",
            "Primitive.max_pool.MaxPool3DWithArgmax.0.backward.output.0": "Functional.max_pool2d.0.backward.output.0",
            "Primitive.avg_pool.AvgPool3D.0.forward.output.0": "Functional.avg_pool2d.0.forward.output.0",
            "Primitive.avg_pool.AvgPool3D.0.backward.input.0": "Functional.avg_pool2d.0.backward.input.0",
            "Primitive.avg_pool.AvgPool3D.0.backward.output.0": "Functional.avg_pool2d.0.backward.output.0",
            "Primitive.avg_pool.AvgPool.0.forward.output.0": "Functional.avg_pool2d.1.forward.output.0",
            "Primitive.avg_pool.AvgPool.0.backward.output.0": "Functional.avg_pool2d.1.backward.output.0"}
    assert {name: rows[name]["Bench Name"] for name in want} == want
    assert rows["Primitive.avg_pool.AvgPool3D.0.backward.output.0"]["NPU Tensor Shape"] == "[4, 4, 1, 4, 4]"
    # PyTorch's collector records no backward of F.relu_: ops.relu's backward rows say so
    assert "calls relu in place (relu_) and records no backward" in \
        rows["Functional.relu.0.backward.output.0"]["Err_message"]
    result, analysis = compared(zoo, "pool_pad", "L1")
    out = {r["NPU Name"]: r for r in result.rows}["Primitive.avg_pool.AvgPool3D.0.forward.output.0"]
    assert out["Error_Origin"] == "introduced" and out["Result"] != "pass"
    assert analysis.culprit["op_name"] == "Primitive.avg_pool.AvgPool3D.0.forward"


def test_an_api_the_golden_calls_in_place_pairs_with_the_out_of_place_call(zoo, tmp_path):
    """PyTorch code often masks in place (scores.masked_fill_(mask, v)); MindSpore has no in-place masked_fill: with
    the golden's call renamed so, the target's Tensor.masked_fill pairs with Tensor.masked_fill_ and a wrong mask
    value is still named there."""
    import json

    for level in ("L1", "mix"):
        text = (zoo / f"pt_attn_plain_{level}" / "dump.json").read_text()
        assert "Tensor.masked_fill.0.forward" in text
        (tmp_path / level).mkdir()
        (tmp_path / level / "dump.json").write_text(text.replace("Tensor.masked_fill.", "Tensor.masked_fill_."))
        assert "Tensor.masked_fill_.0.backward" in json.loads((tmp_path / level / "dump.json").read_text())["data"]
        golden = tmp_path / level / "dump.json"
        result = msprobe.compare(zoo / f"ms_attn_clean_{level}" / "dump.json", golden, api_mapping=True)
        rows = {r["NPU Name"]: r for r in result.rows}
        assert rows["Tensor.masked_fill.0.forward.output.0"]["Bench Name"] == "Tensor.masked_fill_.0.forward.output.0"
        assert rows["Tensor.masked_fill.0.backward.output.0"]["Bench Name"] == \
            "Tensor.masked_fill_.0.backward.output.0"
        assert result.summary.counts["warning"] == result.summary.counts["error"] == 0
        result = msprobe.compare(zoo / f"ms_attn_mask_value_{level}" / "dump.json", golden, api_mapping=True)
        assert result.summary.first_error == "Tensor.masked_fill.0.forward.output.0"
    # -lm places the two calls as one op (masked_fill) in the same module
    text = (zoo / "pt_attn_plain_mix" / "construct.json").read_text()
    (tmp_path / "mix" / "construct.json").write_text(text.replace("Tensor.masked_fill.", "Tensor.masked_fill_."))
    result = msprobe.compare(zoo / "ms_attn_mask_value_mix" / "dump.json", tmp_path / "mix" / "dump.json",
                             layer_mapping=True)
    rows = {r["NPU Name"]: r for r in result.rows}
    assert rows["Tensor.masked_fill.0.forward.output.0"]["Bench Name"] == "Tensor.masked_fill_.0.forward.output.0"
    assert result.summary.first_error == "Tensor.masked_fill.0.forward.output.0"


def _doc_tables() -> dict:
    """docs/cross_framework.md §11.1: {first header cell: [row cells]} of its tables."""
    text = (FIXTURES.parent.parent / "docs" / "cross_framework.md").read_text(encoding="utf-8").split("### 11.1", 1)[1]
    tables: dict = {}
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if len(lines) > 2:
            cells = [[c.strip().strip("`") for c in line.strip("|").split("|")] for line in lines]
            tables[cells[0][0]] = cells[2:]
    return tables


def test_the_figures_of_the_docs_are_measured(zoo):
    """The culprits, warning/error counts and matched rows that docs/cross_framework.md §11.1 quotes."""
    tables = _doc_tables()
    for model in ("pool", "lstm", "attn"):
        for name, _, counts, at_l1, at_mix, layered in tables[f"{model} case"]:
            case = f"{model}_{name}"
            quoted = [tuple(int(v) for v in pair.split("/")) for pair in counts.split(", ")]
            culprits = []
            for level in LEVELS:
                result, analysis = compared(zoo, case, level)
                culprits.append(analysis.culprit["op_name"])
                assert (result.summary.counts["warning"], result.summary.counts["error"]) == \
                    quoted[LEVELS.index(level)], case
            model_, variant, _, _ = CASES[case]
            layer = msprobe.compare(zoo / f"ms_{case}_mix" / "dump.json",
                                    zoo / f"pt_{model_}_{variant}_mix" / "dump.json", layer_mapping=True)
            l1 = None if at_l1.startswith("none") else at_l1
            mix = l1 if at_mix == "same" else None if at_mix == "none" else at_mix
            assert culprits == [l1, mix], case
            first = layer.summary.first_error
            assert (first.rsplit(".", 2)[0] if first else None) == (mix if layered == "same" else None), case
    for model, at_l1, at_mix in tables["model"]:
        for level, quoted in (("L1", at_l1), ("mix", at_mix)):
            matched, of, rows = (int(v) for v in re.findall(r"\d+", quoted))
            assert (rows, matched, of) == MATCHED[model, level]


def test_the_golden_calls_of_an_op_in_every_spelling():
    """A split op's golden calls: the function and the op in place in any spelling, in the golden run's order;
    forward entries only; not the other out-of-place spellings (torch.relu: MindSpore's mint.relu pairs with it by
    name), nor another op whose name starts alike (relu6)."""
    from msprobe.compare.mapping import golden_calls, in_place_aliases

    names = ["Functional.relu.0.forward", "Functional.relu6.0.forward", "Tensor.relu_.0.forward", "Torch.relu.0.forward",
             "Functional.relu.0.backward", "Torch.relu_.1.forward", "Functional.relu_.0.forward"]
    assert golden_calls("Functional.relu", names) == ["Functional.relu.0.forward", "Tensor.relu_.0.forward",
                                                       "Torch.relu_.1.forward", "Functional.relu_.0.forward"]

    class Items:
        def __init__(self, entry_names):
            self.entry_names = entry_names

    target = Items(["Tensor.masked_fill.0.forward", "Tensor.add.0.forward", "Tensor.__add__.0.forward",
                    "Primitive.relu.ReLU.0.forward", "Cell.fc.Dense.forward.0"])
    golden = Items(["Tensor.masked_fill_.0.forward", "Tensor.add.0.forward", "Tensor.add_.0.forward",
                    "Tensor.__add__.0.forward"])
    assert in_place_aliases(target, golden) == {"Tensor.masked_fill": "Tensor.masked_fill_"}


# Against a golden dumped at risk_level ALL the cast to float16 before the float16 dense or conv is recorded on both
# sides: the cast itself is the culprit (its dtype argument row says so), the first op that differs
CULPRIT_AT_ALL = {"block_fp16_dense": "Tensor.to.4.forward", "cnn_fp16_conv": "Tensor.to.0.forward"}


def test_the_planted_bugs_are_named_against_a_golden_dumped_at_risk_all(zoo):
    named, missed = [], []
    for case, (model, _, bug, want) in CASES.items():
        for level in LEVELS:
            if bug is None or (level == "L1" and case in NOT_AT_L1) or model not in ALL_MODELS:
                continue
            result, analysis = compared(zoo, case, level, "_all")
            culprit = result.summary.first_error
            want = CULPRIT_AT_ALL.get(case, want)
            if culprit is not None and want in culprit:
                assert culprit.startswith(analysis.culprit["op_name"])
                named.append((case, level))
            else:
                missed.append((case, level, culprit))
    assert not missed, missed
    assert len(named) >= 2 * 11 - len(NOT_AT_L1)      # every bug run of the three models (others may be added)
    rows = {r["NPU Name"]: r for r in compared(zoo, "cnn_fp16_conv", "L1", "_all")[0].rows}
    assert rows["Tensor.to.0.forward.input.1"]["Result"] == "error"         # Float16 against torch.float32


def test_layout_ops_pair_by_order_and_shapes_with_their_arguments(zoo):
    """MindSpore's Tensor.reshape/permute/to and mint.split pair with PyTorch's Tensor.*/torch.* calls, arguments
    included; nn.LayerNorm's own casts of gamma and beta (MindSpore only) do not shift the model's cast (Tensor.to.4
    in MindSpore, Tensor.to.0 in PyTorch): their tensors, LayerNorm's arguments, pair with layer_norm's weight and
    bias; their dtype argument and gradients have no partner."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "block_clean", "L1", "_all")[0].rows}
    want = {"Tensor.to.4.forward.input.0": "Tensor.to.0.forward.input.0",
            "Tensor.to.4.forward.input.1": "Tensor.to.0.forward.input.1",
            "Tensor.to.4.forward.output.0": "Tensor.to.0.forward.output.0",
            "Tensor.to.0.forward.input.0": "Functional.layer_norm.0.forward.input.2",
            "Tensor.to.1.forward.output.0": "Functional.layer_norm.0.forward.input.3",
            "Tensor.to.0.forward.input.1": "N/A", "Tensor.to.0.backward.input.0": "N/A",
            "Tensor.permute.3.forward.input.3": "Tensor.permute.3.forward.input.3",
            "Tensor.permute.3.backward.output.0": "Tensor.permute.3.backward.output.0",
            "Tensor.reshape.4.forward.input.1": "Tensor.reshape.4.forward.input.1",
            "Tensor.reshape.4.forward.output.0": "Tensor.reshape.4.forward.output.0"}
    assert {name: rows[name]["Bench Name"] for name in want} == want
    cast = rows["Tensor.to.4.forward.input.1"]
    assert (cast["NPU max"], cast["Bench max"], cast["Result"]) == ("Float32", "torch.float32", "pass")
    assert "no golden item matches" in rows["Tensor.to.0.forward.input.1"]["Err_message"]
    rows = {r["NPU Name"]: r for r in compared(zoo, "block_split", "L1", "_all")[0].rows}
    assert rows["Mint.split.0.forward.input.dim"]["Bench Name"] == "Torch.split.0.forward.input.dim"
    assert rows["Mint.split.0.backward.input.2"]["Bench Name"] == "Torch.split.0.backward.input.2"


def test_dense_as_primitives_pairs_its_reshapes_and_shape_queries(zoo):
    """nn.Dense on a 3-D input: Shape, Reshape to 2-D, MatMul, BiasAdd, ops.shape, Reshape back. The Reshapes'
    tensors and the queried tensors are the linear's x and y (equal element counts); Shape's sizes, Reshape's
    target shape and MatMul's output before the bias have no counterpart and keep their note."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "block_clean", "L1")[0].rows}
    x, y = "Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0"
    want = {"Primitive.shape_op.Shape.0.forward.input.0": x, "Primitive.reshape.Reshape.1.forward.input.0": x,
            "Primitive.reshape.Reshape.1.forward.output.0": x, "Functional.shape.0.forward.input.0": y,
            "Primitive.reshape.Reshape.2.forward.input.0": y, "Primitive.reshape.Reshape.2.forward.output.0": y,
            "Primitive.reshape.Reshape.2.backward.input.0": "Functional.linear.0.backward.input.0",
            "Primitive.reshape.Reshape.2.backward.output.0": "Functional.linear.0.backward.input.0",
            "Primitive.shape_op.Shape.0.forward.output.0": "N/A", "Primitive.reshape.Reshape.1.forward.input.1.0": "N/A",
            "Primitive.matmul.MatMul.0.forward.output.0": "N/A", "Primitive.bias_add.BiasAdd.0.forward.input.0": "N/A"}
    assert {name: rows[name]["Bench Name"] for name in want} == want
    for name in ("Primitive.shape_op.Shape.0.forward.output.0", "Primitive.matmul.MatMul.0.forward.output.0"):
        assert "a MindSpore primitive that no PyTorch op" in rows[name]["Err_message"]
    rows = {r["NPU Name"]: r for r in compared(zoo, "mlp_clean", "L1")[0].rows}     # 2-D input: no Reshape
    assert rows["Primitive.shape_op.Shape.1.forward.input.0"]["Bench Name"] == "Functional.linear.1.forward.input.0"
    assert rows["Primitive.bias_add.BiasAdd.1.backward.output.1"]["Bench Name"] == \
        "Functional.linear.1.backward.input.0"       # the gradient of the output before the bias is y's
    rows = {r["NPU Name"]: r for r in compared(zoo, "cnn_clean", "L1")[0].rows}     # nn.BatchNorm2d's checks
    assert rows["Primitive.shape.Shape.1.forward.input.0"]["Bench Name"] == "Functional.batch_norm.0.forward.input.0"


def test_a_layout_call_whose_shapes_differ_is_paired_and_shown(zoo, tmp_path):
    """Between two calls paired by their shapes, the one call left on each side pairs with the other: a reshape
    to another shape (a real difference) is an error row, not N/A."""
    import json

    target = json.loads((zoo / "ms_block_clean_L1" / "dump.json").read_text())
    target["data"]["Tensor.reshape.3.forward"]["output"][0]["shape"] = [2, 6, 8]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "dump.json").write_text(json.dumps(target))
    result = msprobe.compare(tmp_path / "t" / "dump.json", zoo / "pt_block_plain_all_L1" / "dump.json",
                             api_mapping=True)
    rows = {r["NPU Name"]: r for r in result.rows}
    row = rows["Tensor.reshape.3.forward.output.0"]
    assert row["Bench Name"] == "Tensor.reshape.3.forward.output.0" and row["Result"] == "error"
    assert "shape" in row["Err_message"]
    assert rows["Tensor.reshape.4.forward.output.0"]["Bench Name"] == "Tensor.reshape.4.forward.output.0"


def test_a_cell_s_own_cast_of_its_parameter_pairs_with_the_argument_it_becomes(zoo):
    """nn.LayerNorm casts gamma and beta to float32 before its LayerNorm primitive; PyTorch's module does not. The
    cast's tensor is, with the same statistics, the primitive's argument: it pairs with layer_norm's weight and
    bias, at the default golden too, where no cast is recorded. A cast that changes the values (to float16) is
    left alone."""
    rows = {r["NPU Name"]: r for r in compared(zoo, "mlp_clean", "L1")[0].rows}
    assert rows["Tensor.to.0.forward.output.0"]["Bench Name"] == "Functional.layer_norm.0.forward.input.2"
    assert rows["Tensor.to.1.forward.input.0"]["Bench Name"] == "Functional.layer_norm.0.forward.input.3"
    assert rows["Tensor.to.1.forward.input.1"]["Bench Name"] == "N/A"
    rows = {r["NPU Name"]: r for r in compared(zoo, "cnn_fp16_conv", "L1")[0].rows}
    assert rows["Tensor.to.0.forward.output.0"]["Bench Name"] == "N/A"


def test_the_reshapes_of_an_embedding_pair_with_its_indices_and_output(zoo):
    """nn.Embedding on [2, 6] indices: Shape, Reshape of the indices to [12], Gather, Reshape of the output to
    [2, 6, 16]. The flattened indices are the embedding's indices (the same statistics), the reshaped output is the
    tensor the next LayerNorm takes; the target shapes have no counterpart."""
    rows = {r["NPU Name"]: r["Bench Name"] for r in compared(zoo, "block_clean", "L1")[0].rows}
    want = {"Primitive.reshape_flat.Reshape.0.forward.input.0": "Functional.embedding.0.forward.input.0",
            "Primitive.reshape_flat.Reshape.0.forward.output.0": "Functional.embedding.0.forward.input.0",
            "Primitive.get_shp.Shape.0.forward.input.0": "Functional.embedding.0.forward.input.0",
            "Primitive.reshape.Reshape.0.forward.output.0": "Functional.layer_norm.0.forward.input.0",
            "Primitive.reshape.Reshape.0.forward.input.1.0": "N/A"}
    assert {name: rows[name] for name in want} == want
