"""MindSpore names that PyTorch spells otherwise, shared by the API, cell and layer mappings (compare/mapping.py,
compare/layer_mapping.py): the parameter names of MindSpore's nn cells and the primitives whose PyTorch function
takes its arguments in another order."""

from __future__ import annotations

from dataclasses import dataclass

from msprobe.names import counter

# MindSpore functions whose PyTorch counterpart has another name (the generated table pairs equal names only)
FUNCTION_NAMES = {"Functional.dense": "Functional.linear", "MintFunctional.dense": "Functional.linear",
                  "Mint.dense": "Functional.linear"}
PARAMETER_NAMES = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean",
                   "moving_variance": "running_var", "embedding_table": "weight"}


@dataclass(frozen=True)
class ApiRule:
    """One entry of a custom -am yaml: rename ms_api to pt_api and remap argument/output indices."""

    ms_api: str
    pt_api: str
    indices: dict   # state -> {ms index text: pt index text}


# Built-in rules for the MindSpore primitives that nn cells call (by primitive class, whatever the cell's attribute
# name: Primitive.bn_train.BatchNorm) whose PyTorch counterpart takes its arguments in another order. MindSpore
# records a backward's gradients in the reverse order of the forward's tensor inputs (Dense: bias, weight, x),
# PyTorch in their order (x, weight, bias): "grad_output" maps those. An index a rule leaves out (LayerNorm's
# mean and rstd outputs) is not compared. Not Dense: nn.Dense calls Primitive.dense.Dense on 2-D inputs only (else
# MatMul and BiasAdd), so its calls and PyTorch's linear calls are not counted alike.
PRIMITIVE_RULES = {
    "LayerNorm": ApiRule("Primitive.layer_norm.LayerNorm", "Functional.layer_norm",
                         {"input": {"0": "0", "1": "2", "2": "3"}, "output": {"0": "0"},
                          "grad_output": {"0": "2", "1": "1", "2": "0"}, "grad_input": {"0": "0"}}),
    "BatchNorm": ApiRule("Primitive.batch_norm.BatchNorm", "Functional.batch_norm",
                         {"input": {"0": "0", "1": "3", "2": "4", "3": "1", "4": "2"}, "output": {"0": "0"},
                          "grad_output": {"0": "2", "1": "1", "2": "0"}, "grad_input": {"0": "0"}}),
    "Gather": ApiRule("Primitive.gather.Gather", "Functional.embedding",
                      {"input": {"0": "1", "1": "0"}, "output": {"0": "0"}, "grad_output": {"0": "0"},
                       "grad_input": {"0": "0"}}),
    # nn.LSTM (CPU/GPU) makes an ops.LSTM in its construct, recorded as Primitive.LSTM.LSTM: x (time major), h0,
    # c0 and its weights flattened into one tensor; PyTorch's nn.LSTM records Torch.lstm(x, [h0, c0], [weights],
    # ...). Compared: x, h0, c0 (input.1.0 and 1.1 of PyTorch's) and y, h_n, c_n, and the gradient of y; not the
    # flat weights, nor the gradients of the arguments (PyTorch records one at its last autograd node)
    "LSTM": ApiRule("Primitive.LSTM.LSTM", "Torch.lstm",
                    {"input": {"0": "0", "1": "1.0", "2": "1.1"}, "output": {"0": "0", "1": "1", "2": "2"},
                     "grad_output": {}, "grad_input": {"0": "0"}}),
}
# Where entries pair by place (-lm) and not by call count, Dense pairs with linear too; not its input's gradient:
# for an input of more than two dimensions PyTorch records at linear's last autograd node the gradient of the
# flattened output instead (tests/fixtures/cross: Functional.linear.8.backward.output.0 is [16, 32], no input's)
PLACED_RULES = {**PRIMITIVE_RULES, "Dense": ApiRule("Primitive.dense.Dense", "Functional.linear",
                                                    {"input": {"0": "0", "1": "1", "2": "2"}, "output": {"0": "0"},
                                                     "grad_output": {"0": "2", "1": "1"},
                                                     "grad_input": {"0": "0"}})}


def golden_suffix(entry_name: str, suffix: str) -> str | None:
    """The golden item suffix (after the entry name) that a target item's suffix pairs with when the two entries
    are paired by place (-lm): a primitive's arguments and gradients reordered (PLACED_RULES; None for an item
    the rule leaves out), a MindSpore parameter name as PyTorch's (PARAMETER_NAMES)."""
    parts = suffix.split(".")        # ["", "input", "0"], ["", "parameters", "gamma"], ["", "gamma"]
    if entry_name.startswith("Primitive.") and len(parts) == 3 and parts[1] in ("input", "output"):
        rule = PLACED_RULES.get(entry_name.split(".")[2])
        if rule is not None and counter(parts[2]) is not None:
            backward = entry_name.endswith(".backward")
            mapping = rule.indices.get(("grad_" if backward else "") + parts[1])
            if mapping is not None:
                return "." + parts[1] + "." + mapping[parts[2]] if parts[2] in mapping else None
    if entry_name.startswith("Cell.") and parts[-1] in PARAMETER_NAMES and (
            ".parameters_grad." in entry_name or parts[1] == "parameters"):
        return ".".join(parts[:-1] + [PARAMETER_NAMES[parts[-1]]])
    return suffix


def golden_op(entry_name: str, op: str) -> str:
    """The PyTorch op a MindSpore API or primitive entry stands for, by the rules above (Primitive.*.LayerNorm:
    layer_norm, Functional.dense: linear); op itself otherwise. Layer mapping names an API's node by it."""
    if entry_name.startswith("Primitive."):
        rule = PLACED_RULES.get(op)
        return rule.pt_api.split(".")[1] if rule is not None else op
    head, _, rest = entry_name.partition(".")
    mapped = FUNCTION_NAMES.get(f"{head}.{rest.partition('.')[0]}")
    return mapped.split(".")[1] if mapped else op


def out_of_place(op: str) -> str:
    """An API's op without its in-place mark (relu_, masked_fill_: relu, masked_fill; not __add__): PyTorch code
    calls in place what MindSpore, which has no such form, calls out of place; they are one op to pair."""
    return op[:-1] if op.endswith("_") and not op.endswith("__") and len(op) > 1 else op


# Shape changes, views and casts: PyTorch's collector dumps them at risk_level ALL only (the reference's "low risk"
# APIs), and MindSpore's cells call some of them themselves (nn.LayerNorm casts gamma and beta), so their call
# counts drift between the runs. compare/mapping.py layout_op_partners pairs them by order and shapes instead.
LAYOUT_OPS = frozenset("""
squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat repeat_interleave tile
transpose permute moveaxis movedim swapaxes swapdims chunk split split_with_sizes tensor_split unbind stack cat
concat t to type_as float double half bfloat16 int long bool contiguous narrow
""".split())
