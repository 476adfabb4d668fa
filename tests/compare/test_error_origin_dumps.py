"""Error_Origin and the dtype-aware -da answer on dumps made here with our collector from the fixture model: the
refdata set-up (an intended bfloat16 cast of blocks.0.mlp.fc1) with and without a bug added on top (a doubled
attention scale in block 1)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from conftest import FIXTURES, only_file, read_csv, run_cli

torch = pytest.importorskip("torch")

sys.path.insert(0, str(FIXTURES / "pytorch_model"))
import tiny_gpt  # noqa: E402


class _HalfSqrt:
    """Stands in for the `math` module of tiny_gpt while block 1's attention runs: sqrt(hd) / 2, so the
    attention scale 1/sqrt(hd) is doubled (the bug)."""

    @staticmethod
    def sqrt(value):
        return math.sqrt(value) / 2


def _double_the_scale(attention):
    def before(module, args):
        tiny_gpt.math = _HalfSqrt

    def after(module, args, output):
        tiny_gpt.math = math

    attention.register_forward_pre_hook(before)
    attention.register_forward_hook(after)


def _dump(path, task, perturb, bug):
    from msprobe.pytorch import PrecisionDebugger

    torch.manual_seed(0)
    model = tiny_gpt.TinyGPT(perturb_layer=0 if perturb else None)
    if bug:
        _double_the_scale(model.blocks[1].attn)
    idx = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    debugger = PrecisionDebugger(task=task, level="L1", dump_path=str(path))
    debugger.start(model)
    _, loss = model(idx, targets)
    loss.backward()
    debugger.stop()
    (found,) = path.glob("step0/*/dump.json")
    return str(found)


def _da(target, golden, out):
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-da"]) == 0
    return json.loads(only_file(out, "diff_analyze_*.json").read_text())


@pytest.mark.parametrize("task", ["statistics", "tensor"])
def test_intended_cast_is_dtype_and_a_doubled_scale_is_named(task, tmp_path):
    golden = _dump(tmp_path / "golden", task, perturb=False, bug=False)
    cast = _dump(tmp_path / "cast", task, perturb=True, bug=False)
    buggy = _dump(tmp_path / "bug", task, perturb=True, bug=True)

    result = _da(cast, golden, tmp_path / "da_cast")
    assert result["rank_0"][0]["op_name"] == "Functional.linear.2.forward"
    assert result["dtype_aware"]["op_name"] is None

    result = _da(buggy, golden, tmp_path / "da_bug")
    assert result["rank_0"][0]["op_name"] == "Functional.linear.2.forward"     # the first divergence stays
    aware = result["dtype_aware"]
    assert aware["rank"] == 0
    # the attention scale of block 1 is the second Tensor.__mul__ with a python scalar of the forward pass
    golden_data = json.loads(open(golden).read())["data"]
    scales = [name for name, body in golden_data.items() if name.startswith("Tensor.__mul__")
              and name.endswith(".forward") and body["input_args"][1].get("type") == "float"]
    assert aware["op_name"] == scales[1]

    assert run_cli(["compare", "-tp", cast, "-gp", golden, "-o", tmp_path / "table", "--csv", "-c"]) == 0
    rows = read_csv(only_file(tmp_path / "table", "compare_result_*.csv"))
    header = rows[0]
    assert header[header.index("Err_message") + 1] == "Error_Origin"
    origin = {row[0]: row[header.index("Error_Origin")] for row in rows[1:]}
    assert origin["Functional.linear.2.forward.output.0"] == "dtype"
    assert "introduced" not in origin.values()
    assert set(origin.values()) <= {"", "dtype", "inherited"}
    assert all(origin[name] == "" for name in origin if ".input." in name)
