"""Exact matching, N/A rows, duplicates and the dtype rule."""

from __future__ import annotations

from msprobe.compare.match import match_exact
from msprobe.dump.flatten import flatten
from msprobe.frameworks.dtypes import canonical, dtype_rule_ok

from conftest import FIXTURES


def t(dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0}


def test_left_join_in_target_order_and_golden_only_dropped():
    target = flatten({"A.op.0.forward": {"input_args": [t(), t()]}, "A.new.0.forward": {"input_args": [t()]}})
    golden = flatten({"A.old.0.forward": {"input_args": [t()]}, "A.op.0.forward": {"input_args": [t(), t()]}})
    pairs = match_exact(target, golden)
    assert pairs.target.tolist() == [0, 1, 2]
    assert pairs.golden.tolist() == [1, 2, -1]


def test_backward_calls_align_after_renumbering():
    # the target recomputed activations: its backward call counts differ, the order is the same
    target = flatten({"F.relu.4.backward": {"input": [t()]}, "F.relu.9.backward": {"input": [t()]}})
    golden = flatten({"F.relu.0.backward": {"input": [t()]}, "F.relu.1.backward": {"input": [t()]}})
    assert match_exact(target, golden).golden.tolist() == [0, 1]
    assert match_exact(target, golden, renumber_backward=False).golden.tolist() == [-1, -1]


def test_duplicate_keys_give_every_combination():
    target = flatten({"A.op.0.forward": {"input_args": [t()]}})
    golden = flatten({"A.op.0.forward": {"input_args": [t()]}, "x": {}})
    golden.name.append(golden.name[0])
    for column in ("entry", "state", "dtype", "shape", "requires_grad", "data_name"):
        getattr(golden, column).append(getattr(golden, column)[0])
    assert match_exact(target, golden).golden.tolist() == [0, 1]


def test_dtype_rule():
    target = flatten({"A.op.0.forward": {"input_args": [t("torch.bfloat16"), t("torch.int64"), t("torch.int32")]}})
    golden = flatten({"A.op.0.forward": {"input_args": [t("torch.float32"), t("torch.float32"), t("torch.int64")]}})
    assert match_exact(target, golden).golden.tolist() == [0, -1, -1]
    assert match_exact(target, golden, cross_framework=True).golden.tolist() == [0, -1, 2]


def test_dtype_spellings_normalise():
    assert canonical("Float32") == canonical("torch.float32") == canonical("float32") == "float32"
    assert canonical("mindspore.bfloat16") == canonical("BFloat16") == "bfloat16"
    assert canonical("<class 'int'>") == "<class 'int'>" and canonical("torch.Size") == "torch.Size"
    assert dtype_rule_ok("Float16", "torch.float32", cross_framework=True)
    assert not dtype_rule_ok("Bool", "torch.float32", cross_framework=True)


def test_compare_sides_release_the_parsed_leaves_the_graph_keeps_them():
    """Items.record (each leaf's parsed dict, for the graph) would keep the whole parsed dump.json alive through a
    compare: +56 MB peak RSS on the 20k benchmark (231 MB, was 175-188 MB). Compare's sides drop it."""
    from msprobe.compare.pipeline import read_side, side_of
    from msprobe.dump.reader import read_dump

    path = str(FIXTURES / "stats_L1_step0" / "target" / "dump.json")
    side = read_side(path, "target", with_stack=False, with_construct=False)
    assert len(side.items) > 100 and side.items.record == []
    kept = side_of(read_dump(path, "target", with_stack=False, with_construct=False), records=True)
    assert len(kept.items.record) == len(kept.items) and all(r is None or isinstance(r, dict) for r in kept.items.record)


def test_a_backward_pairs_only_with_the_backward_of_its_forwards_partner():
    """A hand-written matmul in place of a Dense in the target (Mint.matmul.2, no partner): the backward calls,
    paired by their order, would put Mint.matmul.2.backward with the golden Mint.matmul.1.backward (shapes
    [4, 6, 32] against [4, 6, 6]) and matmul.1's with matmul.0's; each backward now meets its forward's partner's,
    and the one whose forward has no partner has none."""
    def shaped(shape):
        return {**t(), "shape": shape}

    def dump(counts):
        data = {f"Mint.matmul.{n}.forward": {"input_args": [shaped(s)], "output": [shaped(s)]} for n, s in counts}
        data.update({f"Mint.matmul.{n}.backward": {"input": [shaped(s)], "output": [shaped(s)]}
                     for n, s in reversed(counts)})
        return flatten(data)

    target = dump([(0, [4, 6, 6]), (1, [4, 6, 6]), (2, [4, 6, 32])])
    golden = dump([(0, [4, 6, 6]), (1, [4, 6, 6])])
    pairs = match_exact(target, golden)
    paired = {target.name[a]: (golden.name[b] if b >= 0 else None)
              for a, b in zip(pairs.target.tolist(), pairs.golden.tolist())}
    assert paired["Mint.matmul.2.backward.input.0"] is None and paired["Mint.matmul.2.backward.output.0"] is None
    assert paired["Mint.matmul.1.backward.output.0"] == "Mint.matmul.1.backward.output.0"
    assert paired["Mint.matmul.0.backward.input.0"] == "Mint.matmul.0.backward.input.0"
    # recomputed calls (backward counts of their own, no forward twin) keep the pairing by order
    assert match_exact(flatten({"F.relu.4.backward": {"input": [t()]}}),
                       flatten({"F.relu.0.backward": {"input": [t()]}})).golden.tolist() == [0]
