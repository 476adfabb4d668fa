"""One verdict in every view (issue 27) on models beyond tests/culprits.py (tests/verdict_zoo.py): a ResNet-style CNN
with a perturbed weight, a bidirectional GRU with a wrong LayerNorm eps, a Transformer encoder layer (padding and
causal masks) with an extra scale in its activation or its dropout left on, a checkpointed MLP and an EmbeddingBag
recommender with one linear in float16, an MLP with a tiny loss whose gelu takes another argument in one run. The culprit is named by the summary, the advisor, -da and the graph (its
first node in its highest colour band and its Top-10 first node: the culprit or the innermost module holding it).
Twin runs (another thread count, another vector width) raise no alarm."""

from __future__ import annotations

import json

import pytest
from test_one_verdict import views

from conftest import FIXTURES, only_file, read_csv, run_cli

# model, variant, level, task -> (culprit row of the summary, -da's entry, the graph's first node)
CULPRITS = [
    ("resnet", "perturbed", "mix", "statistics", "Module.layer2.conv2.Conv2d.forward.0.parameters.weight",
     "Module.layer2.conv2.Conv2d.forward.0", "Module.layer2.conv2.Conv2d.forward.0"),
    ("resnet", "perturbed", "L0", "tensor", "Module.layer2.conv2.Conv2d.forward.0.parameters.weight",
     "Module.layer2.conv2.Conv2d.forward.0", "Module.layer2.conv2.Conv2d.forward.0"),
    # L1 records no parameters: the weight is the conv's input, the first item that differs (no graph at L1)
    ("resnet", "perturbed", "L1", "statistics", "Functional.conv2d.4.forward.input.1", "Functional.conv2d.4.forward",
     None),
    ("gru", "eps", "mix", "statistics", "Functional.layer_norm.0.forward.output.0",
     "Functional.layer_norm.0.forward", "Functional.layer_norm.0.forward"),
    ("encoder", "scale", "mix", "statistics", "Functional.gelu.0.forward.output.0", "Functional.gelu.0.forward",
     "Functional.gelu.0.forward"),
    ("encoder", "dropout", "L0", "statistics", "Module.enc.self_attn.MultiheadAttention.forward.0.output.0",
     "Module.enc.self_attn.MultiheadAttention.forward.0", "Module.enc.self_attn.MultiheadAttention.forward.0"),
    ("checkpoint", "half", "mix", "statistics", "Functional.linear.3.forward.output.0", "Functional.linear.3.forward",
     "Functional.linear.3.forward"),
    ("rec", "half", "mix", "tensor", "Functional.linear.1.forward.output.0", "Functional.linear.1.forward",
     "Functional.linear.1.forward"),
    # an argument only the target passes (approximate="tanh"), in a model whose gradients are ~1e-10: the graph
    # pairs the call as the table does, whatever its parameter count
    ("tiny", "tanh", "mix", "statistics", "Functional.gelu.0.forward.output.0", "Functional.gelu.0.forward",
     "Functional.gelu.0.forward"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, variant, level, task, row, entry, node", CULPRITS,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CULPRITS])
def test_every_view_names_the_culprit(name, variant, level, task, row, entry, node, tmp_path, capsys):
    pytest.importorskip("torch")
    import verdict_zoo

    target = verdict_zoo.dump(name, variant, task, level, tmp_path / "target")
    golden = verdict_zoo.dump(name, "base", task, level, tmp_path / "golden")
    found = views(capsys, target, golden, tmp_path, graph=node is not None)
    assert found["summary"] == found["advisor"] == row, found
    assert found["da"] == entry and entry in found["da_line"], found
    if node is not None:
        assert found["graph_first"] == found["graph_top"] == node, found
        assert found["index"][node] >= 0.7                  # a warning made here (0.7) or above


def assert_no_alarm(found: dict) -> None:
    rows = read_csv(found["table"])
    header = rows[0]
    flagged = [r[0] for r in rows[1:] if r[header.index("Error_Origin")] == "introduced"
               or r[header.index("Result")] in ("warning", "error")]
    assert flagged == [] and found["summary"] is None and found["advisor"] == "NA", flagged
    assert found["da"] is None and found["da_aware"] is None, found
    assert max((v for v in found.get("index", {}).values() if v is not None), default=0) < 0.6


@pytest.mark.slow
@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_a_twin_run_with_another_thread_count_raises_no_alarm(task, tmp_path, capsys):
    """The ResNet's conv weight gradients sum 576 products per element in another order with 2 threads: a few
    float32 units, rounding."""
    pytest.importorskip("torch")
    import verdict_zoo

    target = verdict_zoo.dump("resnet", "base", task, "mix", tmp_path / "target", threads=2)
    golden = verdict_zoo.dump("resnet", "base", task, "mix", tmp_path / "golden", threads=1)
    assert (target / "dump.json").read_text() != (golden / "dump.json").read_text()      # the runs differ
    assert_no_alarm(views(capsys, target, golden, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["encoder", "gru"])
def test_a_twin_run_with_another_vector_width_raises_no_alarm(name, tmp_path, capsys):
    """ATEN_CPU_CAPABILITY=avx2 against the default (with 2 threads against 1): rounding only."""
    torch = pytest.importorskip("torch")
    import verdict_zoo

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("no vector unit to vary")
    target = verdict_zoo.dump_in_process(name, "base", "statistics", "mix", tmp_path / "target", 2,
                                         {"ATEN_CPU_CAPABILITY": "avx2"})
    golden = verdict_zoo.dump_in_process(name, "base", "statistics", "mix", tmp_path / "golden", 1)
    assert_no_alarm(views(capsys, target, golden, tmp_path))


# ------------------------------------------------------------------------------------------ a MindSpore/PyTorch twin
MLP = FIXTURES / "cross_mlp"          # made by tests/fixtures/cross_mlp/make.py


def test_a_gradient_one_framework_does_not_record_is_not_an_error(tmp_path, capsys):
    """MindSpore's backward of sub returns a gradient for the (constant) label too, PyTorch's is None: the row has
    no data, so no dtype or shape error, no Error_Origin, and no culprit."""
    capsys.readouterr()
    assert run_cli(["compare", "-tp", MLP / "ms_mix" / "dump.json", "-gp", MLP / "pt_mix" / "dump.json", "-o",
                    tmp_path, "--csv", "-lm"]) == 0
    assert "culprit" not in capsys.readouterr().out
    rows = read_csv(only_file(tmp_path, "compare_result_*.csv"))
    header = rows[0]
    row = next(r for r in rows if r[0] == "Mint.sub.0.backward.output.1")
    assert row[1] == "Torch.sub.0.backward.output.1"
    assert (row[header.index("Result")], row[header.index("Error_Origin")]) == ("pass", "")
    assert json.loads(row[header.index("Err_message")]) == ["note: not compared: the Bench records no tensor here "
                                                            "(null)."]


TWINS = [("mix", ["-lm"]), ("mix", ["-am"]), ("mix", ["-am", "-cm"]), ("L0", ["-lm"]), ("L0", ["-cm"])]


@pytest.mark.slow
@pytest.mark.parametrize("level, options", TWINS, ids=[f"{lv}{''.join(op)}" for lv, op in TWINS])
def test_a_mlp_twin_of_two_frameworks_raises_no_alarm(level, options, tmp_path, capsys):
    """An MLP with LayerNorm in MindSpore and in PyTorch, same weights and data (rounding only: ~1e-6)."""
    found = views(capsys, MLP / f"ms_{level}", MLP / f"pt_{level}", tmp_path, options, graph="-lm" in options)
    rows = read_csv(found["table"])
    assert sum(r[1] != "N/A" for r in rows[1:]) >= 8                  # the mapping pairs rows
    assert_no_alarm(found)
