"""MindSpore target vs PyTorch golden (issue 4): mappings on the real refdata dumps, against the reference."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cross_agreement import agreement

from msprobe.compare import rules
from msprobe.compare.mapping import (
    MappingSet,
    map_api_name,
    map_cell_name,
    map_custom_api,
    parse_api_rules,
)
from msprobe.errors import MsprobeError
from msprobe.frameworks.dtypes import canonical

from conftest import FIXTURES, only_file, read_csv, run_cli

CROSS = FIXTURES / "cross"
MAPS = CROSS / "mappings"
DOC = Path(__file__).resolve().parents[2] / "docs" / "cross_framework.md"
# a row of the counts table of docs/cross_framework.md §9
DOC_ROW = re.compile(r"^\| (\w+) \| .+? \| (\d+) \| (\d+) / (\d+) \| (\d+) \(([\d.]+) %\) \| (\d+) \(([\d.]+) %\) \| (\d+) \|$",
                     re.M)


def doc_counts() -> dict:
    """case -> (rows, matched, reference matched, agree, share %, reference agree, reference share %, reference
    errors) as docs/cross_framework.md §9 quotes them."""
    rows = DOC_ROW.findall(DOC.read_text(encoding="utf-8"))
    return {case: tuple(float(v) if "." in v else int(v) for v in values) for case, *values in rows}


CASES = [
    ("L0_cm", "L0", ["-cm"]),
    ("L0_cm_yaml", "L0", ["-cm", MAPS / "cell_mapping.yaml"]),
    ("L0_lm", "L0", ["-lm", MAPS / "layer_mapping.yaml"]),
    ("L0_dm", "L0", ["-dm", MAPS / "data_mapping.yaml"]),
    ("L1_nomap", "L1", []),
    ("L1_am", "L1", ["-am"]),
    ("L1_lm", "L1", ["-lm", MAPS / "layer_mapping.yaml"]),
    ("mix_nomap", "mix", []),
    ("mix_am", "mix", ["-am"]),
    ("mix_am_userapi", "mix", ["-am", MAPS / "api_mapping.yaml"]),
    ("mix_cm", "mix", ["-cm"]),
    ("mix_cm_yaml", "mix", ["-cm", MAPS / "cell_mapping.yaml"]),
    ("mix_am_cm_yaml", "mix", ["-am", "-cm", MAPS / "cell_mapping.yaml"]),
    ("mix_lm", "mix", ["-lm", MAPS / "layer_mapping.yaml"]),
    ("mix_lm_noyaml", "mix", ["-lm"]),
    ("mix_dm", "mix", ["-dm", MAPS / "data_mapping.yaml"]),
]


@pytest.mark.parametrize("case, level, args", CASES, ids=[c[0] for c in CASES])
def test_mapping_modes_against_reference(case, level, args, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", CROSS / f"ms_{level}" / "dump.json", "-gp", CROSS / f"pt_{level}" / "dump.json",
                    "-o", out, "--csv", "-c", *args]) == 0
    ours = read_csv(only_file(out, "compare_result_*.csv"))
    reference = read_csv(CROSS / "reference" / f"{case}.csv.gz")
    our_matched, our_agree = agreement(ours)
    ref_matched, ref_agree = agreement(reference)
    with capsys.disabled():
        print(f"\n{case}: matched {our_matched} (reference {ref_matched}), agree {our_agree} "
              f"({our_agree / max(our_matched, 1):.1%}; reference {ref_agree}, {ref_agree / max(ref_matched, 1):.1%})")
    assert len(ours) == len(reference)
    assert our_matched >= ref_matched
    assert our_agree >= ref_agree
    if our_matched:   # the built-in parameter names (gamma/beta: weight/bias) add parameter-gradient pairs, which
        # differ as much as the module gradients already paired (~1e-3 of a LayerNorm's): at most 2 points lower
        assert our_agree / our_matched >= ref_agree / max(ref_matched, 1) - 0.02
    # no error merely because of framework dtype spellings or an unrecorded requires_grad (DECISIONS 9)
    header = ours[0]
    for row in ours[1:]:
        messages = json.loads(row[header.index("Err_message")])
        if rules.MSG_DTYPE in messages:
            assert canonical(row[2]) != canonical(row[3])
        if rules.MSG_REQUIRES_GRAD in messages:
            assert "N/A" not in (row[6], row[7])
    if "-lm" in args and level != "L1":     # L1 dumps have an empty construct.json: nothing to generate
        only_file(out, "data_mapping_*.yaml")
    # the figures the docs quote for this case
    ref_errors = sum(row[reference[0].index("Result")] == "error" for row in reference[1:])
    rows, matched, ref_matched_quoted, agree, share, ref_agree_quoted, ref_share, quoted_errors = doc_counts()[case]
    assert (rows, matched, ref_matched_quoted, agree, ref_agree_quoted, quoted_errors) == \
        (len(ours) - 1, our_matched, ref_matched, our_agree, ref_agree, ref_errors)
    assert abs(share - 100 * our_agree / our_matched) < 0.05
    assert abs(ref_share - 100 * ref_agree / ref_matched) < 0.05


def test_the_counts_table_of_the_docs_has_every_case():
    assert sorted(doc_counts()) == sorted(case for case, _, _ in CASES)


def test_backward_calls_pair_in_order_not_reversed(tmp_path):
    """The n-th backward call of an API pairs with the n-th on the other side under every mapping mode."""
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", CROSS / "ms_mix" / "dump.json", "-gp", CROSS / "pt_mix" / "dump.json",
                    "-o", out, "--csv", "-c", "-am"]) == 0
    table = read_csv(only_file(out, "*.csv"))
    pairs = [(r[0], r[1]) for r in table[1:]
             if r[0].startswith("Mint.matmul.") and ".backward." in r[0] and r[1] != "N/A"]
    assert len({a.split(".")[2] for a, _ in pairs}) == 4          # all four backward calls paired
    assert all(a.replace("Mint.", "Torch.", 1) == b for a, b in pairs)


def test_am_on_a_pytorch_target_is_an_error(capsys):
    target = FIXTURES / "stats_L0_step0" / "target" / "dump.json"
    assert run_cli(["compare", "-tp", target, "-gp", target, "-am"]) == 1
    assert "MindSpore" in capsys.readouterr().err


def test_builtin_api_rules():
    table = {"Functional.dense": "Functional.linear", "Tensor.equal": "Tensor.eq", "Functional.abs": "Torch.abs"}
    assert map_api_name("Mint.add.3.forward.input.0", table) == "Torch.add.3.forward.input.0"
    assert map_api_name("MintFunctional.relu.0.backward.output.0", table) == "Functional.relu.0.backward.output.0"
    assert map_api_name("Functional.dense.1.forward.output.0", table) == "Functional.linear.1.forward.output.0"
    assert map_api_name("Tensor.equal.0.forward.input.0", table) == "Tensor.eq.0.forward.input.0"
    assert map_api_name("Functional.unknown.0.forward.input.0", table) == "Functional.unknown.0.forward.input.0"
    assert map_api_name("Cell.fc.Dense.forward.0.input.0", table) == "Cell.fc.Dense.forward.0.input.0"


def test_cell_mapping_full_name_wins_and_substrings_replace_once():
    assert map_cell_name("Cell.fc.Dense.forward.0.input.0", {}) == "Module.fc.Dense.forward.0.input.0"
    mapping = {"layers.0.mlp.fc1.Dense": "layers.0.mlp.c_fc.Linear", "Dense": "Linear"}
    assert map_cell_name("Cell.layers.0.mlp.fc1.Dense.forward.0.output.0", mapping) == \
        "Module.layers.0.mlp.c_fc.Linear.forward.0.output.0"        # the full name wins, substrings not applied
    assert map_cell_name("Cell.layers.1.mlp.fc1.Dense.forward.0.output.0", mapping) == \
        "Module.layers.1.mlp.fc1.Linear.forward.0.output.0"
    assert map_cell_name("Cell.fc.fc.Dense.backward.0.input.0", {"Dense": "Linear", "fc": "FC"}) == \
        "Module.FC.fc.Linear.backward.0.input.0"
    assert map_cell_name("Cell.fc.Dense.parameters_grad.0.weight", {"fc.Dense": "fc.Linear"}) == \
        "Module.fc.Linear.parameters_grad.0.weight"


def _cell_mapping_by_every_key(cell: str, mapping: dict) -> str:
    """The rule of spec §3.9.3 written as a pass over every key: what CellMapping must give, by lookups."""
    if cell in mapping:
        return mapping[cell]
    for key, value in mapping.items():
        if key and key in cell:
            cell = cell.replace(key, value, 1)
    return cell


def test_cell_mapping_lookups_give_what_a_pass_over_every_key_gives():
    import random

    from msprobe.compare.mapping import CellMapping

    generator = random.Random(34)
    for _ in range(300):
        alphabet = "ab.c"
        mapping = {"".join(generator.choice(alphabet) for _ in range(generator.randint(0, 4))):
                   "".join(generator.choice(alphabet + "X") for _ in range(generator.randint(0, 4)))
                   for _ in range(generator.randint(1, 8))}
        table = CellMapping(mapping)
        for _ in range(10):
            cell = "".join(generator.choice(alphabet) for _ in range(generator.randint(0, 12)))
            assert table.rename(cell) == _cell_mapping_by_every_key(cell, mapping), (cell, mapping)


def test_a_cell_mapping_of_50000_keys_is_a_lookup_per_name():
    """-cm with a 50,000-key yaml cost ~3 ms per item name (every key tried on each): now the keys are indexed once
    and a name costs a few lookups."""
    import time

    from msprobe.compare.mapping import CellMapping

    mapping = {f"layer{i}.sub{i % 7}": f"blk{i}.s" for i in range(50_000)}
    mapping["q_proj.Dense"] = "q.Linear"
    names = [f"Cell.model.layers.{i}.attn.q_proj.Dense.forward.0.input.0" for i in range(500)]
    table = CellMapping(mapping)
    started = time.perf_counter()
    renamed = [map_cell_name(name, table) for name in names]
    assert time.perf_counter() - started < 1.0        # a pass over every key took 1.5-6 s for these 500 names
    assert renamed[7] == "Module.model.layers.7.attn.q.Linear.forward.0.input.0"


def test_custom_api_rules_remap_indices():
    (rule,) = parse_api_rules([{"ms_api": "Primitive.layer_norm", "pt_api": "Functional.layer_norm",
                                "ms_args": [0, 1, 2], "pt_args": [0, 2, 3], "ms_output": [0], "pt_output": [0]}], "x")
    name = "Primitive.layer_norm.LayerNorm.2.forward.input.1"
    assert map_custom_api(name, "input", [rule]) == "Functional.layer_norm.2.forward.input.2"
    assert map_custom_api("Primitive.layer_norm.LayerNorm.2.forward.output.0", "output", [rule]) == \
        "Functional.layer_norm.2.forward.output.0"
    assert map_custom_api("Primitive.layer_norm.LayerNorm.2.forward.output.1", "output", [rule]).endswith("abandoned")
    assert map_custom_api("Mint.add.0.forward.input.0", "input", [rule]) is None
    mappings = MappingSet(api=True, api_rules=[rule], data={"Mint.add.0.forward.input.0": "Torch.sum.0.forward.input.0"})
    assert mappings.key("Mint.add.0.forward.input.0", "Mint.add.0.forward.input.0", "input") == \
        ("Torch.sum.0.forward.input.0", True)


@pytest.mark.parametrize("document, words", [
    ([{"ms_api": "A.b", "pt_api": "C.d", "ms_args": [0, 1], "pt_args": [0]}], "different lengths"),
    ([{"ms_api": "A.b", "pt_api": "C.d", "ms_args": [0, 0], "pt_args": [0, 1]}], "repeats"),
    ([{"ms_api": "A.b", "pt_api": "C.d", "ms_args": [-1], "pt_args": [0]}], "non-negative"),
    ([{"ms_api": "A.b", "pt_api": "C.d", "colour": 1}], "unknown keys"),
    ([{"ms_api": "A.b"}], "needs ms_api and pt_api"),
    (["text"], "mapping"),
])
def test_custom_api_yaml_errors_name_the_entry(document, words):
    with pytest.raises(MsprobeError, match=words):
        parse_api_rules(document, "api.yaml")


def test_custom_api_yaml_shapes_are_equivalent(tmp_path):
    from msprobe.dump.paths import load_yaml

    entry = "ms_api: Mint.add\npt_api: Torch.add\nms_args: [0, 1]\npt_args: [1, 0]\n"
    shapes = {"single.yaml": entry, "list.yaml": "- " + entry.replace("\n", "\n  ").rstrip() + "\n",
              "multi.yaml": entry + "---\n" + entry.replace("add", "mul")}
    parsed = {}
    for name, text in shapes.items():
        (tmp_path / name).write_text(text)
        parsed[name] = parse_api_rules(load_yaml(str(tmp_path / name), "api mapping"), name)
    assert parsed["single.yaml"] == parsed["list.yaml"] == parsed["multi.yaml"][:1]
    assert len(parsed["multi.yaml"]) == 2


def test_out_of_range_index_is_an_error(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("- ms_api: Mint.matmul\n  pt_api: Torch.matmul\n  ms_args: [0, 7]\n"
                                       "  pt_args: [0, 1]\n")
    assert run_cli(["compare", "-tp", CROSS / "ms_mix" / "dump.json", "-gp", CROSS / "pt_mix" / "dump.json",
                    "-o", tmp_path / "o", "-am", tmp_path / "bad.yaml"]) == 1
    err = capsys.readouterr().err
    assert "Mint.matmul" in err and "out of range" in err


def test_legacy_form_with_compare_json(tmp_path):
    config = {"npu_path": str(CROSS / "ms_L0" / "dump.json"), "bench_path": str(CROSS / "pt_L0" / "dump.json"),
              "stack_path": str(CROSS / "ms_L0" / "stack.json"), "is_print_compare_log": False}
    (tmp_path / "compare.json").write_text(json.dumps(config))
    assert run_cli(["-f", "mindspore", "compare", "-i", tmp_path / "compare.json", "-o", tmp_path / "o", "-s",
                    "-cm", MAPS / "cell_mapping.yaml", "--csv"]) == 0
    table = read_csv(only_file(tmp_path / "o", "compare_result_*.csv"))
    assert agreement(table)[0] == 154          # every row: the yaml and the built-in parameter names (gamma: weight)


def test_custom_index_lists_follow_gradient_semantics_in_backward():
    (rule,) = parse_api_rules([{"ms_api": "Mint.gather", "pt_api": "Torch.gather", "ms_args": [0, 1],
                                "pt_args": [1, 0], "ms_outputs": [0], "pt_outputs": [0]}], "x")
    assert map_custom_api("Mint.gather.0.forward.input.0", "input", [rule]) == "Torch.gather.0.forward.input.1"
    # backward input 0 is the gradient of forward output 0; backward output 1 that of forward input 1
    assert map_custom_api("Mint.gather.0.backward.input.0", "input", [rule]) == "Torch.gather.0.backward.input.0"
    assert map_custom_api("Mint.gather.0.backward.output.1", "output", [rule]) == "Torch.gather.0.backward.output.0"


def test_singular_and_plural_keys_together_are_an_error():
    with pytest.raises(MsprobeError, match="not both"):
        parse_api_rules([{"ms_api": "A.b", "pt_api": "C.d", "ms_output": [0], "ms_outputs": [0], "pt_outputs": [0]}],
                        "x")


def test_rules_for_apis_absent_from_the_dumps_are_ignored(tmp_path, capsys):
    (tmp_path / "api.yaml").write_text("ms_api: Mint.matmul\npt_api: Torch.nonexistent\nms_args: [0]\npt_args: [0]\n")
    assert run_cli(["compare", "-tp", CROSS / "ms_mix" / "dump.json", "-gp", CROSS / "pt_mix" / "dump.json",
                    "-o", tmp_path / "o", "--csv", "-c", "-am", tmp_path / "api.yaml"]) == 0
    assert "Torch.nonexistent does not occur in the golden dump" in capsys.readouterr().out
    table = read_csv(only_file(tmp_path / "o", "*.csv"))
    assert agreement(table)[0] == 372         # the built-in mapping still pairs Mint.matmul (and cells, norms)


@pytest.mark.parametrize("mapping", [["-lm"], ["-am"]])
def test_twin_runs_after_an_update_raise_no_parameter_warning(mapping, tmp_path):
    """Step 1 of the MindSpore GPT and its PyTorch twin: one SGD update spread the gradients' rounding into the
    weights (biases 6e-5 of their magnitude apart, ~500 float32 units); that is no difference before the step."""
    step1 = FIXTURES / "cross_step1"
    assert run_cli(["compare", "-tp", step1 / "ms_mix" / "dump.json", "-gp", step1 / "pt_mix" / "dump.json",
                    "-o", tmp_path / "o", "--csv", *mapping]) == 0
    header, *rows = read_csv(only_file(tmp_path / "o", "compare_result_*.csv"))
    table = [dict(zip(header, row)) for row in rows]
    params = [row for row in table if ".parameters." in row["NPU Name"] and row["Bench Name"] != "N/A"]
    assert len(params) > 10 or mapping == ["-am"]      # -am maps APIs: cells and their parameters stay unmatched
    assert not [row["NPU Name"] for row in params if row["Result"] != "pass"]
    assert not [row["NPU Name"] for row in table if row["Result"] == "error" or row["Error_Origin"] == "introduced"]


def test_builtin_cell_class_parameter_and_primitive_names():
    """Issue 32: without a yaml, -am and -cm pair nn.Dense with nn.Linear, gamma/beta/moving_* with
    weight/bias/running_*, and the primitives of nn.LayerNorm/BatchNorm/Embedding with PyTorch's functions (their
    arguments and MindSpore's reversed backward gradients reordered)."""
    keys = MappingSet(api=True)
    assert keys.key("Cell.fc.Dense.forward.0.output.0", "Cell.fc.Dense.forward.0.output.0", "output")[0] == \
        "Module.fc.Linear.forward.0.output.0"
    assert keys.key("x", "Cell.ln.LayerNorm.parameters_grad.0.gamma", "parameters_grad")[0] == \
        "Module.ln.LayerNorm.parameters_grad.0.weight"
    assert keys.key("x", "Cell.bn.BatchNorm2d.forward.0.parameters.moving_variance", "parameters")[0] == \
        "Module.bn.BatchNorm2d.forward.0.parameters.running_var"
    assert keys.key("x", "Cell.Dense.gamma.Dense.forward.0.input.0", "input")[0] == \
        "Module.Dense.gamma.Linear.forward.0.input.0"          # only the class segment and a parameter's leaf
    ln = "Primitive.layer_norm.LayerNorm.2.{}"
    assert keys.key("x", ln.format("forward.input.1"), "input")[0] == "Functional.layer_norm.2.forward.input.2"
    assert keys.key("x", ln.format("forward.output.1"), "output")[0].endswith(".abandoned")      # mean
    assert keys.key("x", ln.format("backward.output.0"), "output")[0] == "Functional.layer_norm.2.backward.output.2"
    assert keys.key("x", "Primitive.bn_train.BatchNorm.0.forward.input.3", "input")[0] == \
        "Functional.batch_norm.0.forward.input.1"                # moving mean: running_mean
    assert keys.key("x", "Primitive.gather.Gather.1.forward.input.0", "input")[0] == \
        "Functional.embedding.1.forward.input.1"                 # the table: the weight
    assert keys.key("x", "Functional.dense.0.forward.input.0", "input")[0] == "Functional.linear.0.forward.input.0"
    assert MappingSet().key("x", "Cell.fc.Dense.forward.0.output.0", "output")[0] == "Cell.fc.Dense.forward.0.output.0"


def _cast_pair(tmp_path, ms_dtype: str):
    """A MindSpore x.to(<ms_dtype>) then softmax against PyTorch's x.to(torch.float32) then softmax."""
    def tensor(kind, dtype, high, low, mean, norm):
        return {"type": kind, "dtype": dtype, "shape": [4, 8], "Max": high, "Min": low, "Mean": mean, "Norm": norm}

    x = (1.25, -0.75, 0.125, 3.5)
    half = (1.25, -0.75, 0.12506103515625, 3.5009765625) if ms_dtype == "Float16" else x
    soft = (0.5, 0.01, 0.125, 1.0)
    ms = {"Tensor.to.0.forward": {"input_args": [tensor("mindspore.Tensor", "Float32", *x),
                                                 {"type": "mindspore.dtype", "value": ms_dtype}],
                                  "input_kwargs": {}, "output": [tensor("mindspore.Tensor", ms_dtype, *half)]},
          "Functional.softmax.0.forward": {"input_args": [tensor("mindspore.Tensor", ms_dtype, *half)],
                                           "input_kwargs": {"axis": {"type": "int", "value": -1}},
                                           "output": [tensor("mindspore.Tensor", ms_dtype, *soft)]}}
    pt = {"Tensor.to.0.forward": {"input_args": [tensor("torch.Tensor", "torch.float32", *x),
                                                 {"type": "torch.dtype", "value": "torch.float32"}],
                                  "input_kwargs": {}, "output": [tensor("torch.Tensor", "torch.float32", *x)]},
          "Functional.softmax.0.forward": {"input_args": [tensor("torch.Tensor", "torch.float32", *x)],
                                           "input_kwargs": {"dim": {"type": "int", "value": -1}},
                                           "output": [tensor("torch.Tensor", "torch.float32", *soft)]}}
    paths = []
    for name, framework, data in (("ms", "mindspore", ms), ("pt", "pytorch", pt)):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "dump.json"
        path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": framework,
                                    "dump_data_dir": None, "data": data}))
        paths.append(path)
    return paths


def test_a_cast_to_another_dtype_is_the_culprit_across_frameworks(tmp_path):
    """Issue 32: a MindSpore Tensor.to(float16) where PyTorch casts to float32: its dtype argument differs (an
    error, as a differing scalar argument is in a PyTorch pair) and the cast is the culprit, not a later op; the
    same cast to Float32 (torch.float32 on the other side) is no difference."""
    import msprobe

    (tmp_path / "half").mkdir()
    target, golden = _cast_pair(tmp_path / "half", "Float16")
    result = msprobe.compare(target, golden, api_mapping=True)
    rows = {r["NPU Name"]: r for r in result.rows}
    assert rows["Tensor.to.0.forward.input.1"]["Result"] == "error"
    assert rules.MSG_SCALAR in rows["Tensor.to.0.forward.input.1"]["Err_message"]
    assert rows["Tensor.to.0.forward.output.0"]["Error_Origin"] == "introduced"
    assert result.summary.first_error == "Tensor.to.0.forward.output.0"
    (tmp_path / "same").mkdir()
    target, golden = _cast_pair(tmp_path / "same", "Float32")
    result = msprobe.compare(target, golden, api_mapping=True)
    assert result.summary.counts["error"] == result.summary.counts["warning"] == 0
