"""The MindSpore collector's behaviour (docs/dump.md, MindSpore section): configuration in the reference's format,
step folders, filters, what the zoo models record (cells called several times, tuple/dict outputs, integers,
float16 and bfloat16, jit functions and cells), restoring everything at stop(), failures that never reach the
training step, and a step that fails.

These tests need mindspore, which needs numpy<2 and lives in its own environment (see .ci/run); elsewhere they are
skipped with the reason below."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import count_records

ms = pytest.importorskip("mindspore", reason="mindspore is not installed (it needs numpy<2: the MindSpore collector "
                                             "tests run in the separate environment of .ci/run)")
from mindspore import Tensor, mint, nn, ops  # noqa: E402

from msprobe.mindspore import DumpConfigError, PrecisionDebugger, records  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import ms_zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def dump_dir(root: Path, step: int = 0) -> Path:
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return proc


def load(root: Path, name: str = "dump.json", step: int = 0):
    return json.loads((dump_dir(root, step) / name).read_text())


def run(tmp_path, name, level, steps=1, **kwargs):
    root = tmp_path / f"{name}_{level}"
    ms_zoo.train(name, PrecisionDebugger(dump_path=str(root), level=level, **kwargs), steps=steps)
    return load(root)["data"], root


# ---------------------------------------------------------------------------------------------- configuration
def test_reference_config_json_and_its_mindspore_keys(tmp_path):
    config = {"task": "statistics", "dump_path": str(tmp_path / "d"), "rank": [], "step": [1], "level": "mix",
              "async_dump": False, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                                  "summary_mode": "md5", "device": "host", "precision": "high",
                                                  "tensor_list": []}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    debugger = PrecisionDebugger(config_path=str(path))
    assert (debugger.config.level, debugger.config.summary_mode, debugger.config.framework) == \
        ("mix", "md5", "mindspore")
    ms_zoo.train("mlp", debugger, steps=2)
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["step1"]          # only the chosen step
    (leaf,) = (tmp_path / "d" / "step1").iterdir()
    assert leaf.name.startswith("proc")                                        # no rank outside a job
    data = json.loads((leaf / "dump.json").read_text())
    assert data["framework"] == "mindspore" and data["task"] == "statistics"
    assert all(len(r["md5"]) == 8 for body in data["data"].values() for r in _tensor_records(body))


@pytest.mark.parametrize("kwargs, message", [
    ({"task": "overflow_check"}, "task"), ({"level": "L3"}, "level"), ({"data_mode": ["sideways"]}, "data_mode"),
    ({"summary_mode": "sha"}, "summary_mode"), ({"scop": ["x"]}, "did you mean 'scope'")])
def test_invalid_configuration_is_one_clear_error_before_training(tmp_path, kwargs, message):
    with pytest.raises(DumpConfigError, match=message):
        PrecisionDebugger(dump_path=str(tmp_path), **kwargs)


def test_the_repository_root_config_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ms_zoo.train("mlp", PrecisionDebugger(config_path=str(ROOT / "config.json")), steps=2)
    assert [p.name for p in (tmp_path / "dump_data").iterdir()] == ["step0"]
    assert any(n.startswith("Mint.") for n in load(tmp_path / "dump_data")["data"])


def test_level_l0_needs_the_model_and_graph_mode_is_refused(tmp_path):
    from msprobe.errors import MsprobeError

    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
    with pytest.raises(MsprobeError, match="pass the model"):
        debugger.start()
    with pytest.raises(MsprobeError, match="nn.Cell"):
        debugger.start(model=object())


# ---------------------------------------------------------------------------------------------- filters
def test_scope_list_and_data_mode(tmp_path):
    data, _ = run(tmp_path / "scope", "mlp", "mix", scope=["fc1"])
    assert data and all("fc1" in n for n in data)
    # `list` as the reference reads it: cells are listed by name too; full names pick one direction
    data, _ = run(tmp_path / "list", "mlp", "mix", list=["Mint.sub"])
    assert list(data) == ["Mint.sub.0.forward", "Mint.sub.0.backward"]
    data, _ = run(tmp_path / "list_forward", "mlp", "mix", list=["Mint.sub.0.forward"])
    assert list(data) == ["Mint.sub.0.forward"]
    # at mix a listed cell brings the APIs called inside it (the next dump of `msprobe compare -da`)
    data, _ = run(tmp_path / "list_cell", "mlp", "mix", list=["Cell.fc1.Dense."])
    cells = {n for n in data if n.startswith("Cell.")}
    assert cells and all(n.startswith("Cell.fc1.Dense.") for n in cells)
    assert any(n.startswith("Primitive.") for n in data)
    data, _ = run(tmp_path / "forward", "mlp", "mix", data_mode=["forward"])
    assert data and all(".forward" in n for n in data)
    data, _ = run(tmp_path / "input", "mlp", "mix", data_mode=["input"])
    assert data and not any("output" in body for body in data.values())
    assert "input" in data["Cell.fc1.Dense.backward.0"] and "input_args" in data["Cell.fc1.Dense.forward.0"]


def test_models_given_as_a_list_name_their_cells_by_index(tmp_path):
    model = ms_zoo.build("mlp")
    grad_fn = ms.value_and_grad(lambda *a: model(*a), None, model.trainable_params())
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
    with debugger.step_scope([model]):                # a list of one model, as the reference names it
        grad_fn(*ms_zoo._batches("mlp", 0))
    names = list(load(tmp_path)["data"])
    assert names[0] == "Cell.0.fc1.Dense.forward.0" and all(n.startswith("Cell.0.") for n in names)


# ---------------------------------------------------------------------------------------------- what is recorded
def test_a_cell_called_in_a_loop_and_a_cell_called_twice(tmp_path):
    data, root = run(tmp_path, "recurrent", "mix")
    steps = 5
    assert [n for n in data if n.startswith("Cell.hid.Dense.forward.")] == \
        [f"Cell.hid.Dense.forward.{i}" for i in range(steps)]
    assert sorted(n for n in data if n.startswith("Cell.hid.Dense.backward.")) == \
        [f"Cell.hid.Dense.backward.{i}" for i in range(steps)]
    assert [n for n in data if ".parameters_grad." in n and "hid" in n] == ["Cell.hid.Dense.parameters_grad.0"]
    construct = load(root, "construct.json")
    assert construct["Primitive.matmul.MatMul.0.forward"] == "Cell.inp.Dense.forward.0"
    data, _ = run(tmp_path, "shared", "L0")
    assert {"Cell.block.SequentialCell.forward.0", "Cell.block.SequentialCell.forward.1",
            "Cell.block.0.Dense.forward.1", "Cell.block.SequentialCell.backward.1"} <= set(data)


def test_tuple_and_dict_outputs_and_integer_inputs(tmp_path):
    data, _ = run(tmp_path, "outputs", "L0")
    assert [r["shape"] for r in data["Cell.pair.PairOut.forward.0"]["output"]] == [[3, 4], [3, 4]]
    out = data["Cell.dict.DictOut.forward.0"]["output"][0]
    assert list(out) == ["logits", "probs"] and out["probs"]["dtype"] == "Float32"
    assert len(data["Cell.pair.PairOut.backward.0"]["input"]) == 2
    backward = data["Cell.dict.DictOut.backward.0"]        # the dict's tensors are hooked one by one
    assert [r["shape"] for r in backward["input"]] == [[3, 2], [3, 2]]
    assert [r["shape"] for r in backward["output"]] == [[3, 4]]
    data, _ = run(tmp_path, "integers", "mix")
    ids = data["Cell.emb.Embedding.forward.0"]["input_args"][0]
    assert ids["dtype"] == "Int32" and isinstance(ids["Max"], int) and isinstance(ids["Mean"], float)
    assert data["Cell.emb.Embedding.backward.0"]["output"] == []              # integer argument: no gradient
    assert "Mint.remainder.0.backward" not in data                             # integer outputs: no backward


class _Pair(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 2)

    def construct(self, x):
        y = self.fc(x)
        return _Named(y, mint.mul(y, 2.0))


_Named = __import__("collections").namedtuple("_Named", "first second")


def test_a_namedtuple_result_keeps_its_type_and_its_gradients_are_recorded(tmp_path):
    model = nn.SequentialCell([_Pair()])          # the namedtuple comes from a hooked sub-cell
    seen = []

    def loss(x):
        out = model(x)
        seen.append(type(out))
        return mint.mean(out.first) + mint.mean(out.second)
    grad_fn = ms.value_and_grad(loss, None, model.trainable_params())
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix")
    with debugger.step_scope(model):
        grad_fn(Tensor(np.ones((2, 3), np.float32)))
    assert seen == [_Named]
    data = load(tmp_path)["data"]
    assert [r["shape"] for r in data["Cell.0._Pair.backward.0"]["input"]] == [[2, 2], [2, 2]]
    assert [r["shape"] for r in data["Mint.mul.0.backward"]["input"]] == [[2, 2]]


def test_half_precision_records_are_rounded_to_their_dtype(tmp_path):
    data, _ = run(tmp_path, "half", "L1")
    cast = data["Functional.cast.0.forward"]
    assert cast["output"][0]["dtype"] == "Float16" and cast["input_args"][1] == {"type": "mindspore.dtype",
                                                                                  "value": "Float16"}
    for record in _tensor_records(data):
        if record["dtype"] == "Float16":
            assert all(float(np.float16(record[k])) == record[k] for k in ("Max", "Min", "Mean", "Norm"))
    array = (np.arange(6, dtype=np.float32) / 3).reshape(2, 3)
    record = records.Recorder("md5").tensor(Tensor(array, ms.bfloat16), "x")
    bf16 = np.asarray(Tensor(array, ms.bfloat16).asnumpy())
    widened = bf16.astype(np.float32)
    assert record["dtype"] == "BFloat16" and record["Max"] == float(widened.max())
    assert record["Mean"] == float(np.asarray(widened.astype(np.float64).mean(), dtype=bf16.dtype).astype(float))
    assert record["md5"] == format(__import__("zlib").crc32(widened.tobytes()), "08x")
    zero_d = records.Recorder("statistics").tensor(Tensor(-2.5, ms.float32), "y")
    assert [zero_d[k] for k in ("Max", "Min", "Mean", "Norm")] == [-2.5] * 4      # a 0-d tensor: its value


def test_jit_function_and_jit_cell_train_identically_and_the_jit_cell_is_seen_inside(tmp_path, msprobe_records):
    """A jit function is one Jit entry at L1/mix; a jit Cell of the model is recorded from inside its graph at
    L0/mix, in the step's own folder in PyNative's order (docs/dump.md, static graph), and is a Jit entry at L1."""
    expected = ms_zoo.train("jit")
    block = ["Cell.block.fc.Dense.forward.0", "Cell.block.norm.LayerNorm.forward.0", "Cell.block.JitBlock.forward.0",
             "Cell.block.norm.LayerNorm.backward.0", "Cell.block.fc.Dense.backward.0", "Cell.block.JitBlock.backward.0"]
    for level in ("L0", "L1", "mix"):
        root = tmp_path / level
        got = ms_zoo.train("jit", PrecisionDebugger(dump_path=str(root), level=level))
        assert all(np.array_equal(a, b) for a, b in zip(expected[0], got[0]))
        assert all(np.array_equal(expected[1][k], got[1][k]) for k in expected[1])
        assert sorted(p.name for p in root.iterdir()) == ["step0", "step1"]
        names = list(load(root)["data"])
        jit = [n for n in names if n.startswith("Jit.")]
        assert [n for n in names if n.startswith("Cell.block.")] == ([] if level == "L1" else block)
        if level == "L0":
            assert jit == []
            # the jit cell's entries stand between the PyNative calls around it
            assert names.index("Cell.fc.Dense.forward.0") < names.index(block[0])
            assert names.index(block[2]) < names.index("Cell.head.Dense.forward.0")
            assert names.index("Cell.head.Dense.backward.0") < names.index(block[3])
            assert names.index(block[5]) < names.index("Cell.fc.Dense.backward.0")
        elif level == "mix":
            assert jit == ["Jit._scaled_gelu.0.forward", "Jit._scaled_gelu.0.backward", "Jit.SGD.0.forward"]
        else:
            assert jit == ["Jit._scaled_gelu.0.forward", "Jit.JitBlock.0.forward", "Jit.JitBlock.0.backward",
                           "Jit._scaled_gelu.0.backward", "Jit.SGD.0.forward"]
        # the API calls inside the graphs are not seen; LayerNorm only as the jit cell's own sub-cell
        assert not any(n.startswith("Mint.add") or ("LayerNorm" in n and not n.startswith("Cell.block.norm."))
                       for n in names)
    assert count_records(msprobe_records, "compiled with @ms.jit") == 0       # no jit cell goes unseen


class _UsesHookedCell(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.out = nn.Dense(4, 1)

    def construct(self, x):
        return mint.mean(self.out(_through(self, x)))


@ms.jit
def _through(model, x):
    return mint.add(model.fc(x), x.sum())


@pytest.mark.parametrize("level", ("L0", "L1", "mix"))
def test_a_jit_function_calling_a_hooked_cell_compiles_and_trains_identically(tmp_path, level):
    def train(debugger):
        ms.set_seed(1)
        model = _UsesHookedCell()
        for p in model.trainable_params():
            p.set_data(Tensor(np.full(p.shape, 0.1, np.float32)))
        opt = nn.SGD(model.trainable_params(), 0.1)
        grad_fn = ms.value_and_grad(model, None, opt.parameters)
        losses = []
        for step in range(2):
            if debugger:
                debugger.start(model)
            loss, grads = grad_fn(Tensor(np.ones((2, 4), np.float32) * (step + 1)))
            opt(grads)
            if debugger:
                debugger.stop()
                debugger.step()
            losses.append(loss.asnumpy())
        return losses, [p.asnumpy() for p in model.trainable_params()]
    got = train(PrecisionDebugger(dump_path=str(tmp_path), level=level))
    expected = train(None)
    assert all(np.array_equal(a, b) for a, b in zip(expected[0] + expected[1], got[0] + got[1]))
    names = list(load(tmp_path)["data"])
    assert ("Cell.out.Dense.forward.0" in names) == (level != "L1")
    assert ("Jit._through.0.forward" in names) == (level != "L0")
    assert not any("Cell.fc." in n for n in names)            # runs inside the graph


class _CustomBackward(nn.Cell):
    def __init__(self):
        super().__init__()
        self.w = ms.Parameter(Tensor(np.full((4,), 0.5, np.float32)), name="cw")

    def construct(self, x):
        return mint.mul(x, self.w) * 2

    def bprop(self, x, out, dout):
        return (dout * 3,)


class _WithCustom(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.custom = _CustomBackward()
        self.out = nn.Dense(4, 1)

    def construct(self, x):
        return mint.mean(self.out(self.custom(self.fc(x))))


def test_a_cell_with_a_custom_bprop(tmp_path):
    """Cell.register_forward_hook ignores a cell with a bprop: its entries still come, with the bprop's gradient."""
    def train(debugger):
        ms.set_seed(1)
        model = _WithCustom()
        for p in model.trainable_params():
            p.set_data(Tensor(np.full(p.shape, 0.1, np.float32)))
        opt = nn.SGD(model.trainable_params(), 0.1)
        grad_fn = ms.value_and_grad(model, None, opt.parameters)
        for step in range(2):
            if debugger:
                debugger.start(model)
            opt(grad_fn(Tensor(np.ones((2, 4), np.float32) * (step + 1)))[1])
            if debugger:
                debugger.stop()
                debugger.step()
        return [p.asnumpy() for p in model.trainable_params()]
    got = train(PrecisionDebugger(dump_path=str(tmp_path), level="L0"))
    assert all(np.array_equal(a, b) for a, b in zip(train(None), got))
    data = load(tmp_path)["data"]
    forward = data["Cell.custom._CustomBackward.forward.0"]
    x, w = forward["input_args"][0]["Max"], forward["parameters"]["w"]["Max"]         # 0.5 and 0.1
    assert "dump_error" not in forward and forward["output"][0]["Max"] == pytest.approx(x * w * 2)
    backward = data["Cell.custom._CustomBackward.backward.0"]
    assert backward["output"][0]["Max"] == pytest.approx(3 * backward["input"][0]["Max"])      # dout * 3


def test_an_api_function_held_by_a_cell_is_recorded_under_its_own_name(tmp_path):
    """nn.TransformerEncoderLayer keeps ops.relu as its `activation`, taken when the model was built (before the
    collector wrapped the APIs): its calls are Functional.relu entries, as the reference records them, and the
    attribute is the original function again after stop()."""
    data, root = run(tmp_path, "encoder", "mix")
    model_layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    assert model_layer.activation is ops.relu
    assert {"Functional.relu.0.forward", "Functional.relu.0.backward"} <= set(data)
    assert not [n for n in data if "is_floating_point" in n]      # a dtype query, as the reference
    construct = load(root, "construct.json")
    assert construct["Functional.relu.0.forward"] == "Cell.enc.TransformerEncoderLayer.forward.0"
    model, relu = ms_zoo.build("encoder"), ops.relu
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "again"), level="L1")
    debugger.start(model)
    assert model.enc.activation is ops.relu and ops.relu is not relu        # the wrapper, in both places
    debugger.stop()
    assert model.enc.activation is relu and ops.relu is relu


class _Tied(nn.Cell):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.head = nn.Dense(6, 10)
        self.head.weight = self.emb.embedding_table

    def construct(self, ids, labels):
        return ops.cross_entropy(self.head(self.emb(ids)).reshape(-1, 10), labels.reshape(-1))


def test_a_tied_parameter_keeps_its_own_name_in_both_cells(tmp_path):
    """An output projection sharing the embedding's table: both cells record it, under its own name
    (`embedding_table`, as the reference), and its gradient (the sum of both uses) in both parameters_grad."""
    ms.set_seed(1)
    model = _Tied()
    opt = nn.SGD(model.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(model, None, opt.parameters)
    ids, labels = Tensor(np.array([[1, 2, 3]], np.int32)), Tensor(np.array([[2, 3, 4]], np.int32))
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0")
    debugger.start(model)
    opt(grad_fn(ids, labels)[1])
    debugger.stop()
    data = load(tmp_path)["data"]
    assert set(data["Cell.head.Dense.forward.0"]["parameters"]) == {"embedding_table", "bias"}
    assert set(data["Cell.head.Dense.parameters_grad.0"]) == {"embedding_table", "bias"}
    assert data["Cell.head.Dense.parameters_grad.0"]["embedding_table"] == \
        data["Cell.emb.Embedding.parameters_grad.0"]["embedding_table"]


def test_start_stop_and_step_called_on_the_class(tmp_path):
    """The reference's start/stop/step are class methods: `PrecisionDebugger.start(model)` records with the newest
    debugger."""
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix")
    model = ms_zoo.build("mlp")
    opt = nn.SGD(model.trainable_params(), 0.1)
    grad_fn = ms.value_and_grad(model, None, opt.parameters)
    for step in range(2):
        PrecisionDebugger.start(model)
        opt(grad_fn(*ms_zoo._batches("mlp", step))[1])
        PrecisionDebugger.stop()
        PrecisionDebugger.step()
    assert debugger.current_step == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["step0", "step1"]
    assert "Cell.fc1.Dense.forward.0" in load(tmp_path, step=1)["data"]


# ---------------------------------------------------------------------------------------------- restoring
def test_everything_is_put_back_at_stop(tmp_path):
    tensor_dict = dict(vars(ms.Tensor))
    originals = {"add": mint.add, "softmax": mint.nn.functional.softmax, "gelu": ops.gelu}
    model = ms_zoo.build("mlp")
    matmul_class = type(model.fc1.matmul)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix")
    debugger.start(model)
    assert mint.add is not originals["add"] and type(model.fc1.matmul) is not matmul_class
    assert model.fc1._forward_pre_hook
    assert Tensor.from_numpy(np.ones(2, np.float32)).shape == (2,)        # a staticmethod stays one
    debugger.stop()
    assert {"add": mint.add, "softmax": mint.nn.functional.softmax, "gelu": ops.gelu} == originals
    assert dict(vars(ms.Tensor)) == tensor_dict
    assert type(model.fc1.matmul) is matmul_class
    assert not model.fc1._forward_pre_hook and not model.fc1._forward_hook


# ---------------------------------------------------------------------------------------------- failures
def test_a_failure_inside_the_collector_never_reaches_training(tmp_path, monkeypatch, msprobe_records):
    expected = ms_zoo.train("cnn")

    def broken(tensor):
        raise RuntimeError("no host copy today")
    monkeypatch.setattr(records, "host_array", broken)
    got = ms_zoo.train("cnn", PrecisionDebugger(dump_path=str(tmp_path), level="mix"))
    assert all(np.array_equal(a, b) for a, b in zip(expected[0], got[0]))
    assert all(np.array_equal(expected[1][k], got[1][k]) for k in expected[1])
    data = load(tmp_path)["data"]
    assert data and not any(_tensor_records(body) for body in data.values())
    assert all("dump_error" in json.dumps(body) for body in data.values())       # each entry says why
    assert "no host copy today" in json.dumps(data)
    messages = [r.getMessage() for r in msprobe_records if "no host copy today" in r.getMessage()]
    kinds = [m.split(" of ")[0] for m in messages]               # "recording input", "recording gradient", ...
    assert messages and len(kinds) == len(set(kinds))            # one line per kind of failure


def test_a_step_that_raises_keeps_what_was_recorded(tmp_path):
    model = ms_zoo.build("mlp")
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="mix")
    original = model.ln.construct

    def fails(x):
        original(x)
        raise ValueError("bad batch")
    model.ln.construct = fails
    x, target = Tensor(np.ones((4, 8), np.float32)), Tensor(np.ones((4, 1), np.float32))
    with pytest.raises(ValueError, match="bad batch"):
        with debugger.step_scope(model):
            model(x, target)
    dump = load(tmp_path)
    assert dump["incomplete"].startswith("the step raised ValueError: bad batch")
    data = dump["data"]
    assert "Cell.fc1.Dense.forward.0" in data and "output" in data["Cell.fc1.Dense.forward.0"]
    # the cell is closed where it raised, and its entry names the exception (issue 34)
    assert data["Cell.ln.LayerNorm.forward.0"]["dump_error"] == "the call raised ValueError: bad batch"
    assert "input_args" in data["Cell.ln.LayerNorm.forward.0"]
    assert debugger.current_step == 1 and not model.fc1._forward_pre_hook


EXITS = r"""
import sys
sys.path.insert(0, {zoo!r})
import mindspore as ms, numpy as np, ms_zoo
from mindspore import Tensor
from msprobe.mindspore import PrecisionDebugger
model = ms_zoo.build("mlp")
debugger = PrecisionDebugger(dump_path={out!r}, level="mix")
debugger.start(model)
model(Tensor(np.ones((4, 8), np.float32)), Tensor(np.ones((4, 1), np.float32)))
sys.exit(3)
"""


def test_the_process_ending_without_stop_writes_the_step(tmp_path):
    code = EXITS.format(zoo=str(Path(__file__).parent), out=str(tmp_path / "d"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr[-2000:]
    dump = load(tmp_path / "d")
    assert dump["incomplete"] == "the process exited before stop() was called"
    assert "Cell.fc2.Linear.forward.0" in dump["data"] and "Mint.mean.0.forward" in dump["data"]


def _flat(value):
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _flat(item)
    elif isinstance(value, list):
        for item in value:
            yield from _flat(item)


def _tensor_records(value) -> list:
    return [r for r in _flat(value) if r.get("type") == "mindspore.Tensor"]
