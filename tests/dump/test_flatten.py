"""Flattening entries into items: every record kind of spec §2.4-2.6."""

from __future__ import annotations

import pytest

from msprobe.dump.flatten import EMPTY_CRC, crc32_text, flatten
from msprobe.errors import DumpFormatError


def tensor(**extra):
    record = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 3], "Max": 1.0, "Min": -1.0,
              "Mean": 0.0, "Norm": 2.0, "requires_grad": True}
    record.update(extra)
    return record


def rows(data, **kwargs):
    items = flatten(data, **kwargs)
    return items, {name: i for i, name in enumerate(items.name)}


def test_api_entry_sections_and_row_order():
    data = {"Module.fc.Linear.forward.0": {
        "input_args": [tensor()], "input_kwargs": {"scale": {"type": "float", "value": 0.5}},
        "output": [tensor()], "parameters": {"weight": tensor(), "bias": tensor()}}}
    items, _ = rows(data)
    assert items.name == ["Module.fc.Linear.forward.0.input.0", "Module.fc.Linear.forward.0.input.scale",
                          "Module.fc.Linear.forward.0.parameters.weight", "Module.fc.Linear.forward.0.parameters.bias",
                          "Module.fc.Linear.forward.0.output.0"]
    assert items.state == ["input", "input", "parameters", "parameters", "output"]


def test_tensor_fields():
    items, index = rows({"Functional.relu.0.forward": {"input_args": [tensor()], "output": [tensor(md5="abcd1234")]}})
    i = index["Functional.relu.0.forward.input.0"]
    assert (items.dtype[i], items.shape[i], items.requires_grad[i]) == ("torch.float32", "[2, 3]", "True")
    assert (items.stat_max[i], items.stat_min[i], items.stat_mean[i], items.stat_norm[i]) == (1.0, -1.0, 0.0, 2.0)
    assert items.md5[i] == EMPTY_CRC == "00000000"
    assert items.md5[index["Functional.relu.0.forward.output.0"]] == "abcd1234"

    assert items.is_tensor[i] and items.data_name[i] == "-1"


def test_md5_of_a_tensor_record_with_a_value_and_no_md5():
    """The reference's md5 of a tensor without an md5 field: the CRC-32 of its value text (issue 28, section 2)."""
    record = tensor(dtype="torch.int64", shape=[3], value=[1, 2, 3], Max=3, Min=1, Mean=2.0, Norm=3.7416573867739413)
    items, index = rows({"Torch.tensor.0.forward": {"input_args": [record], "output": [tensor(md5="")]}})
    assert items.md5[index["Torch.tensor.0.forward.input.0"]] == crc32_text("[1, 2, 3]") == "b8213bc1"
    assert items.md5[index["Torch.tensor.0.forward.output.0"]] == EMPTY_CRC      # an empty md5 is none


def test_mindspore_tensor_without_requires_grad_and_0d():
    record = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [], "Max": 3.0, "Min": 3.0,
              "Mean": 3.0, "Norm": 3.0}
    items, _ = rows({"Mint.add.0.forward": {"input_args": [record]}})
    assert items.requires_grad == [None] and items.shape == ["[]"]


def test_bool_tensor_statistics_are_text():
    record = tensor(dtype="torch.bool", Max=True, Min=False, Mean=None, Norm=None)
    items, _ = rows({"Tensor.__eq__.0.forward": {"output": [record]}})
    assert (items.stat_max[0], items.stat_min[0], items.stat_mean[0]) == ("True", "False", None)


@pytest.mark.parametrize("record, dtype, shape, stat, md5", [
    ({"type": "int", "value": 3}, "<class 'int'>", "[]", 3, crc32_text("3")),
    ({"type": "float", "value": 2.0}, "<class 'float'>", "[]", 2.0, crc32_text("2.0")),
    ({"type": "bool", "value": False}, "<class 'bool'>", "[]", False, crc32_text("False")),
    ({"type": "str", "value": "mean"}, "<class 'str'>", "[]", "mean", crc32_text("mean")),
    ({"type": "torch.dtype", "value": "torch.float16"}, "<class 'str'>", "[]", "torch.float16", None),
    ({"type": "torch.device", "value": "npu:0"}, "<class 'str'>", "[]", "npu:0", None),
    ({"type": "torch.memory_format", "format": "contiguous_format"}, "<class 'NoneType'>", "[]", None, None),
    ({"type": "ellipsis", "value": "..."}, "ellipsis", "[]", "...", None),
    ({"type": "slice", "value": [0, 4, None]}, "slice", "(3,)", None, None),
    ({"type": "torch.Size", "value": [2, 3]}, "torch.Size", "[2, 3]", None, None),
    ({"type": "torch.ProcessGroup", "group_ranks": [0, 1, 2, 3], "group_id": "ab12"}, "torch.ProcessGroup", "[]",
     "[0, 1, 2, 3]", "[0, 1, 2, 3]"),
    ({"type": "numpy.float32", "value": 1.5}, "<class 'float'>", "[]", 1.5, None),
])
def test_scalar_records(record, dtype, shape, stat, md5):
    items, _ = rows({"Torch.op.0.forward": {"input_args": [record]}})
    assert (items.dtype[0], items.shape[0], items.stat_max[0], items.stat_norm[0]) == (dtype, shape, stat, stat)
    assert items.requires_grad == [None] and not items.is_tensor[0]
    if md5 is not None:
        assert items.md5[0] == md5


def test_peer_arguments_keep_their_value_as_text():
    items, _ = rows({"Distributed.send.0.forward": {"input_kwargs": {"dst": {"type": "int", "value": 1}}}})
    assert items.name == ["Distributed.send.0.forward.input.dst"]
    assert (items.dtype[0], items.stat_max[0], items.md5[0]) == ("int", "1", "1")


def test_null_leaf_and_nested_containers():
    body = {"input_args": [None, [tensor(), {"y": tensor(), "info": {"hw": None}}], [], {}]}
    items, _ = rows({"Cell.net.Net.forward.0": body})
    assert items.name == ["Cell.net.Net.forward.0.input.0", "Cell.net.Net.forward.0.input.1.0",
                          "Cell.net.Net.forward.0.input.1.1.y", "Cell.net.Net.forward.0.input.1.1.info.hw"]
    assert items.dtype[0] is None and items.md5[0] is None and items.stat_max[0] is None


def test_data_name_gives_the_item_name():
    record = tensor(data_name="Functional.add.0.forward.kwargs.other.npy")
    items, _ = rows({"Functional.add.0.forward": {"input_kwargs": {"other": record}}})
    assert items.name == ["Functional.add.0.forward.kwargs.other"]
    assert items.data_name == ["Functional.add.0.forward.kwargs.other.npy"]


def test_parameters_grad_new_and_old_forms():
    items, _ = rows({"Module.fc.Linear.parameters_grad.0": {"weight": [tensor()], "bias": [tensor()]},
                     "Module.fc.Linear.parameters_grad": {"weight": [tensor()]}})
    assert items.name == ["Module.fc.Linear.parameters_grad.0.weight", "Module.fc.Linear.parameters_grad.0.bias",
                          "Module.fc.Linear.parameters_grad.weight"]
    assert set(items.state) == {"parameters_grad"}


def test_p2p_leaf_uses_its_tensor():
    p2p = {"class_type": "torch.distributed.P2POp", "tensor": tensor(), "op": "isend", "peer": 1, "tag": 0}
    items, _ = rows({"Distributed.batch_isend_irecv.0.forward": {"input_args": [[p2p]]}})
    assert items.name == ["Distributed.batch_isend_irecv.0.forward.input.0.0"]
    assert items.dtype == ["torch.float32"] and items.extra[0]["peer"] == 1


def test_backward_sections_and_unknown_names_skipped():
    items, _ = rows({"Functional.relu.0.backward": {"input": [tensor()], "output": [tensor()]},
                     "weird_entry": {"input_args": [tensor()]}})
    assert items.name == ["Functional.relu.0.backward.input.0", "Functional.relu.0.backward.output.0"]
    assert items.entry_names == ["Functional.relu.0.backward"]


def test_debug_json_values():
    items, _ = rows({"x2.0.debug": tensor(), "loss.0.debug": [tensor(), {"a": tensor()}]}, debug=True)
    assert items.name == ["x2.0.debug", "loss.0.debug.0", "loss.0.debug.1.a"]
    assert set(items.state) == {"debug"}


def test_backward_renumbering_keys():
    data = {"Functional.linear.3.backward": {"input": [tensor()]},
            "Functional.linear.5.backward": {"input": [tensor()]},
            "Module.fc.Linear.backward.4": {"input": [tensor()]},
            "Functional.linear.5.forward": {"input_args": [tensor()]}}
    items = flatten(data)
    assert items.keys(renumber_backward=True) == [
        "Functional.linear.0.backward.input.0", "Functional.linear.1.backward.input.0",
        "Module.fc.Linear.backward.0.input.0", "Functional.linear.5.forward.input.0"]
    assert items.keys(renumber_backward=False) == items.name


def test_backward_renumbering_keys_of_entries_of_many_rows():
    """Every row of a renumbered entry is renamed (but one whose name its data_name gave), entries without rows
    and unparsable ones in between, an entry already numbered in order left as it is."""
    data = {"Functional.linear.0.backward": {"input": [tensor(), tensor()], "output": [tensor()]},
            "Functional.relu.0.backward": {"input": [], "output": []},
            "weird_entry": {"input_args": [tensor()]},
            "Functional.linear.7.backward": {"input": [tensor(), tensor(data_name="other.0.pt")],
                                             "output": [None]},
            "Functional.linear.2.forward": {"input_args": [tensor()]},
            "Functional.linear.9.backward": {"output": [tensor()]}}
    items = flatten(data)
    assert items.entry_first == [0, -1, 3, 6, 7]
    assert items.keys(renumber_backward=True) == [
        "Functional.linear.0.backward.input.0", "Functional.linear.0.backward.input.1",
        "Functional.linear.0.backward.output.0",
        "Functional.linear.1.backward.input.0", "other.0", "Functional.linear.1.backward.output.0",
        "Functional.linear.2.forward.input.0", "Functional.linear.2.backward.output.0"]


@pytest.mark.parametrize("body, words", [
    ({"input_args": [tensor(shape="2x3")]}, "shape"),
    ({"input_args": [tensor(requires_grad="yes")]}, "requires_grad"),
    ({"input_args": [{"type": "str", "value": "=cmd|' /C calc'!A0"}]}, "special characters"),
    ({"input_args": [tensor(type="@torch.Tensor")]}, "special characters: '@torch.Tensor'"),    # reference's test
    ({"output": [tensor(data_name="-x.pt")]}, "special characters: '-x.pt'"),
    ({"parameters": {"weight": tensor(md5="+1+1")}}, "special characters"),
    ({"input_args": [tensor(data_name=5)]}, "data_name"),
    ({"input_args": [7]}, "unexpected value"),
])
def test_malformed_records(body, words):
    with pytest.raises(DumpFormatError, match=words):
        flatten({"Functional.relu.0.forward": body})


def test_formula_entry_name_and_depth_limit():
    with pytest.raises(DumpFormatError, match="special characters"):
        flatten({"=HYPERLINK(1).0.forward": {}})
    deep: list = [tensor()]
    for _ in range(450):
        deep = [deep]
    with pytest.raises(DumpFormatError, match="nested deeper"):
        flatten({"Functional.relu.0.forward": {"input_args": deep}})


def _zoo() -> dict:
    """Entries holding every kind of leaf the inline reading of flatten takes or leaves to the one-by-one reading,
    each kind twice (the second read with its texts known)."""
    body = {
        "input_args": [
            tensor(), tensor(), tensor(requires_grad=False), tensor(requires_grad=None), tensor(md5="0a1b2c3d"),
            tensor(Max=3, Min=-2, Mean=None, Norm=None, dtype="torch.int64"), tensor(Max=True, Min=False),
            tensor(Max="\x00msprobe:inf", Min="\x00msprobe:ninf", Mean="\x00msprobe:nan"), tensor(shape=[]),
            tensor(shape=[2.0, 3.0]), tensor(shape=[2, 3]), tensor(shape=[[2], 3]), tensor(dtype=7),
            {"type": "torch.Tensor", "dtype": "Float32", "shape": [4], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
             "Norm": 1.0},
            {"type": "float", "value": 0.5}, {"type": "float", "value": -0.0}, {"type": "float", "value": 0.0},
            {"type": "int", "value": 3}, {"type": "bool", "value": True}, {"type": "int", "value": 1},
            {"type": "NoneType", "value": None}, {"type": "float", "value": "\x00msprobe:nan"},
            {"type": "str", "value": "mean"}, {"type": "torch.Size", "value": [2, 3]}, {"type": "slice",
                                                                                      "value": [0, 2, None]},
            {"type": "ellipsis", "value": "..."}, {"type": "torch.dtype", "value": "torch.float32"},
            {"type": "int"}, tensor(data_name="Functional.relu.0.forward.input.29.pt"), tensor(dump_error="lost"),
            None, [tensor(), {"type": "int", "value": 2}],
        ],
        "input_kwargs": {"src": {"type": "int", "value": 1}, "dim": {"type": "int", "value": -1},
                         "group": {"type": "torch.ProcessGroup", "group_ranks": [0, 1]}},
        "output": [tensor(), tensor(md5="0a1b2c3d"), tensor(shape=[2.0, 3.0])],
    }
    return {"Functional.relu.0.forward": body, "Functional.relu.1.forward": body,
            "Module.fc.Linear.parameters_grad": {"weight": tensor(), "bias": None}}


def test_inline_reading_reads_every_leaf_as_the_one_by_one_reading(monkeypatch):
    import msprobe.dump.flatten as module

    fast = flatten(_zoo())
    monkeypatch.setattr(module, "TENSOR_KEYS", frozenset())      # every leaf through _Flattener.row
    monkeypatch.setattr(module, "SCALAR_KEYS", frozenset())
    slow = flatten(_zoo())
    for column in ("name", "entry", "state", "dtype", "shape", "requires_grad", "stat_max", "stat_min", "stat_mean",
                   "stat_norm", "md5", "data_name", "is_tensor", "entry_names", "entry_first", "notes"):
        assert repr(getattr(fast, column)) == repr(getattr(slow, column)), column
    assert fast.record == slow.record
    assert len(fast) == 2 * 39 + 2
    i = fast.name.index("Functional.relu.0.forward.input.15")       # -0.0 and 0.0 keep their own texts
    assert (fast.stat_max[i], fast.md5[i], fast.md5[i + 1]) == (-0.0, crc32_text("-0.0"), crc32_text("0.0"))
