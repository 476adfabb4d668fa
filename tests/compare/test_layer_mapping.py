"""Layer mapping: scopes from construct.json, yaml translation, ParallelTransformer renumbering."""

from __future__ import annotations

from msprobe.compare.layer_mapping import (
    build_tree,
    entry_scopes,
    generate_data_mapping,
    parse_layer_mapping,
    translate,
)
from msprobe.dump.flatten import flatten


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


def test_explicit_layers_index_mapping_without_parallel_transformer():
    data_t = {"Cell.layers.5.Block.forward.0": {"output": [t()]}}
    data_g = {"Module.layers.0.Block.forward.0": {"output": [t()]}}
    target, golden = flatten(data_t), flatten(data_g)
    mapping = parse_layer_mapping([{"layers": {"5": "0"}}], "x")
    assert generate_data_mapping(target, golden, {"Cell.layers.5.Block.forward.0": None},
                                 {"Module.layers.0.Block.forward.0": None}, mapping) == {
        "Cell.layers.5.Block.forward.0.output.0": "Module.layers.0.Block.forward.0.output.0"}
