"""Layer mapping: scopes from construct.json, yaml translation, ParallelTransformer renumbering."""

from __future__ import annotations

import pytest

from msprobe.compare.layer_mapping import (
    build_tree,
    entry_scopes,
    generate_data_mapping,
    parse_layer_mapping,
    translate,
)
from msprobe.dump.flatten import flatten
from msprobe.errors import MsprobeError


def t(value=1.0):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": value, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0}


def side(module_prefix, fc_name, layer_numbers, api_type):
    data, construct = {}, {}
    for layer in layer_numbers:
        cell = f"{module_prefix}.decoder.layers.{layer}.mlp.{fc_name}.Linear.forward.0"
        api = f"{api_type}.matmul.{layer}.forward"
        data[api] = {"input_args": [t(layer)], "output": [t(layer)]}
        data[cell] = {"input_args": [t(layer)], "output": [t(layer)]}
        construct[api] = cell
        construct[cell] = None
    owner = f"{module_prefix}.decoder.ParallelTransformer.forward.0"
    data[owner] = {"output": [t()]}
    construct[owner] = None
    return flatten(data), construct


def test_translate_uses_node_types_and_multi_segment_keys():
    items, construct = side("Cell", "fc1", [0, 1], "Mint")
    tree = build_tree(entry_scopes(items, construct))
    mapping = parse_layer_mapping([{"MLP": {"fc1": "c_fc"}, "mlp": {"fc1": "c_fc"}, "Cell": {"decoder": "dec"}}], "x")
    assert translate(("decoder", "layers", "0", "mlp", "fc1", "matmul"), tree, mapping) == \
        ("dec", "layers", "0", "mlp", "c_fc", "matmul")


def test_layers_index_remap_and_parallel_transformer_renumbering():
    target, t_construct = side("Cell", "fc1", [4, 5], "Mint")     # pipeline stage 2 numbers its layers 4, 5
    golden, g_construct = side("Module", "c_fc", [0, 1], "Torch")
    mapping = parse_layer_mapping([{"mlp": {"fc1": "c_fc"}}], "x")
    data = generate_data_mapping(target, golden, t_construct, g_construct, mapping)
    assert data["Mint.matmul.4.forward.input.0"] == "Torch.matmul.0.forward.input.0"
    assert data["Mint.matmul.5.forward.output.0"] == "Torch.matmul.1.forward.output.0"
    assert data["Cell.decoder.layers.5.mlp.fc1.Linear.forward.0.output.0"] == \
        "Module.decoder.layers.1.mlp.c_fc.Linear.forward.0.output.0"


def test_parallel_transformer_known_from_construct_only():
    # the reference's own -lm fixture dumps the layers of a ParallelTransformer but not the ParallelTransformer:
    # construct.json names it as their parent; a pipeline stage numbering its layers 4, 5 still pairs with 0, 1
    def without_owner(prefix, fc, layers, api):
        items, construct = side(prefix, fc, layers, api)
        owner = f"{prefix}.decoder.ParallelTransformer.forward.0"
        data = {}
        for layer in layers:
            cell = f"{prefix}.decoder.layers.{layer}.mlp.{fc}.Linear.forward.0"
            data[f"{api}.matmul.{layer}.forward"] = {"input_args": [t(layer)], "output": [t(layer)]}
            data[cell] = {"input_args": [t(layer)], "output": [t(layer)]}
            construct[cell] = owner
        del construct[owner]
        return flatten(data), construct

    target, t_construct = without_owner("Cell", "fc1", [4, 5], "Mint")
    golden, g_construct = without_owner("Module", "c_fc", [0, 1], "Torch")
    mapping = parse_layer_mapping([{"mlp": {"fc1": "c_fc"}}], "x")
    data = generate_data_mapping(target, golden, t_construct, g_construct, mapping)
    assert data["Mint.matmul.4.forward.input.0"] == "Torch.matmul.0.forward.input.0"
    assert data["Cell.decoder.layers.5.mlp.fc1.Linear.forward.0.output.0"] == \
        "Module.decoder.layers.1.mlp.c_fc.Linear.forward.0.output.0"


def test_explicit_layers_index_mapping_without_parallel_transformer():
    data_t = {"Cell.layers.5.Block.forward.0": {"output": [t()]}}
    data_g = {"Module.layers.0.Block.forward.0": {"output": [t()]}}
    target, golden = flatten(data_t), flatten(data_g)
    mapping = parse_layer_mapping([{"layers": {"5": "0"}}], "x")
    assert generate_data_mapping(target, golden, {"Cell.layers.5.Block.forward.0": None},
                                 {"Module.layers.0.Block.forward.0": None}, mapping) == {
        "Cell.layers.5.Block.forward.0.output.0": "Module.layers.0.Block.forward.0.output.0"}


# An add MindSpore runs inside its own indexing code, and one on the user's line; PyTorch dumps two adds on the
# user's line. The shape of the reference's own layer-mapping fixture (issue 28), with lines written here.
MS_PKG, PT_PKG, USER = "/py/site-packages/mindspore", "/py/site-packages/torch", "/home/me/train/model.py"
MS_TEMPLATE = "File /tools/msprobe/mindspore/dump/hook_cell/wrap_api.py, line 98, in api_function, \n return ApiTemplate(n)(*a)"
PT_TEMPLATE = "File /tools/msprobe/pytorch/hook_module/wrap_tensor.py, line 61, in op_template, \n return TensorOPTemplate(n)(*a)"
USER_LINES = [f"File {USER}, line 12, in make_mask, \n mask[b, (i + 1):] = 0", f"File {USER}, line 40, in main, \n main()"]
MS_STACKS = {
    "Tensor.__add__.0.forward": [MS_TEMPLATE,
                                 f"File {MS_PKG}/ops/composite/_compile_utils.py, line 140, in _index_update, \n a + b",
                                 f"File {MS_PKG}/ops/composite/_compile_utils.py, line 203, in _tensor_getitem, \n f()",
                                 *USER_LINES],
    "Tensor.__add__.1.forward": [MS_TEMPLATE, *USER_LINES]}
PT_STACKS = {"Tensor.__add__.0.forward": [PT_TEMPLATE, *USER_LINES], "Tensor.__add__.1.forward": [PT_TEMPLATE, *USER_LINES]}


def test_framework_caller_of_a_stack():
    from msprobe.compare.layer_mapping import framework_caller

    assert framework_caller(MS_STACKS["Tensor.__add__.0.forward"], "mindspore") == "_tensor_getitem"
    assert framework_caller(MS_STACKS["Tensor.__add__.1.forward"], "mindspore") == ""
    assert framework_caller(PT_STACKS["Tensor.__add__.0.forward"], "pytorch") == ""
    # 26.x stacks carry no Template line: the region is the whole stack (as in the reference)
    nn_linear = [f"File {PT_PKG}/nn/modules/linear.py, line 125, in helper, \n F.linear(x)",
                 f"File {PT_PKG}/nn/modules/module.py, line 1789, in _call_impl, \n forward_call()", *USER_LINES]
    assert framework_caller(nn_linear, "pytorch") == "_call_impl"
    # after a Template line, the region of a PyTorch stack ends at the first module forward
    assert framework_caller([PT_TEMPLATE, f"File {PT_PKG}/nn/modules/linear.py, line 125, in forward, \n F.linear(x)"],
                            "pytorch") == ""
    assert framework_caller([f"File {MS_PKG}/nn/cell.py, line 733, in __call__, \n c()"], "mindspore") == ""
    assert framework_caller(None, "mindspore") == "" and framework_caller(["short line"], "mindspore") == ""


def test_an_api_without_a_parent_is_placed_by_the_framework_function_that_called_it():
    """The reference pairs MindSpore's Tensor.__add__.1 (the user's line) with PyTorch's Tensor.__add__.0, and
    leaves __add__.0 (inside MindSpore's _tensor_getitem) unmatched; by counter ours paired 0-0 and 1-1."""
    target = flatten({name: {"input_args": [t()], "output": [t()]} for name in MS_STACKS})
    golden = flatten({name: {"input_args": [t()], "output": [t()]} for name in PT_STACKS})
    no_parent = {name: "" for name in MS_STACKS}
    data = generate_data_mapping(target, golden, no_parent, dict(no_parent), {}, MS_STACKS, PT_STACKS)
    assert data == {"Tensor.__add__.0.forward.input.0": "N/A", "Tensor.__add__.0.forward.output.0": "N/A",
                    "Tensor.__add__.1.forward.input.0": "Tensor.__add__.0.forward.input.0",
                    "Tensor.__add__.1.forward.output.0": "Tensor.__add__.0.forward.output.0"}


def test_layer_mapping_reads_both_stacks_in_the_compare(tmp_path):
    import json

    from conftest import only_file, read_csv, run_cli

    for side, stacks, framework, kind in (("ms", MS_STACKS, "mindspore", "mindspore.Tensor"),
                                          ("pt", PT_STACKS, "pytorch", "torch.Tensor")):
        folder = tmp_path / side
        folder.mkdir()
        record = dict(t(), type=kind, dtype="Float32" if side == "ms" else "torch.float32")
        data = {name: {"input_args": [record], "output": [record]} for name in stacks}
        (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "mix", "framework": framework,
                                                      "data": data}))
        (folder / "stack.json").write_text(json.dumps(stacks))
        (folder / "construct.json").write_text(json.dumps({name: "" for name in stacks}))
    out = tmp_path / "out"
    assert run_cli(["compare", "-tp", tmp_path / "ms" / "dump.json", "-gp", tmp_path / "pt" / "dump.json", "-o", out,
                    "--csv", "-lm"]) == 0
    rows = {row[0]: row[1] for row in read_csv(only_file(out, "compare_result_*.csv"))[1:]}
    assert rows["Tensor.__add__.1.forward.output.0"] == "Tensor.__add__.0.forward.output.0"
    assert rows["Tensor.__add__.0.forward.output.0"] == "N/A"


BILLION_LAUGHS = "\n".join(
    ["Linear:", "  fc1: c_fc", "  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"  {b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]) + "\n"


def _limited_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_a_layer_mapping_bomb_is_refused_in_one_line_in_seconds(tmp_path):
    """A 'billion laughs' of nested aliases (under 600 bytes) was expanded by str() of each child value: the compare
    hung or ran out of memory. Any child value that is not a name is refused, on the CLI and in the API."""
    import json
    import os
    import subprocess
    import sys
    import time

    import msprobe

    bomb = tmp_path / "lm.yaml"
    bomb.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 600
    for folder, framework in (("ms", "mindspore"), ("pt", "pytorch")):
        (tmp_path / folder).mkdir()
        name = "Tensor.add.0.forward"
        (tmp_path / folder / "dump.json").write_text(json.dumps(
            {"task": "statistics", "level": "mix", "framework": framework,
             "data": {name: {"input_args": [t()], "output": [t()]}}}))
        (tmp_path / folder / "construct.json").write_text(json.dumps({name: None}))
    args = ["-tp", str(tmp_path / "ms" / "dump.json"), "-gp", str(tmp_path / "pt" / "dump.json"),
            "-o", str(tmp_path / "out"), "-lm", str(bomb)]
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "msprobe", "compare", *args], capture_output=True, text=True,
                          timeout=120, preexec_fn=_limited_memory, env=dict(os.environ, NO_COLOR="1"))
    assert time.monotonic() - started < 60
    assert done.returncode != 0 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if str(bomb) in line]
    assert "child names (texts), got a list" in line and len(line) < 400
    with pytest.raises(MsprobeError, match="got a list"):
        msprobe.compare(args[1], args[3], layer_mapping=str(bomb))


def test_layer_mapping_names_may_be_bare_numbers():
    assert parse_layer_mapping([{"layers": {5: 0}, 7: {"a": "b"}}], "x") == {"layers": {"5": "0"}, "7": {"a": "b"}}
    for bad in ({"Linear": {"fc1": ["c_fc"]}}, {"Linear": {"fc1": None}}, {"Linear": {"fc1": True}},
                {"Linear": {"fc1": {"x": "y"}}}, {("a",): {"fc1": "c"}}):
        with pytest.raises(MsprobeError, match="x: "):
            parse_layer_mapping([bad], "x")
