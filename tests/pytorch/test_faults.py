"""The collector never loses the step and never raises into training, whatever the model, thread, dtype, name or
config (issue 25): one section per fault found on the collector before it, each at L0, L1 and mix where it applies.
Training is checked bit-identical to the same training without the debugger where the fault used to change it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import FullDisk, count_records, read_csv, run_cli

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402
from torch.overrides import _get_current_function_mode_stack  # noqa: E402

from msprobe.pytorch import DumpConfigError, PrecisionDebugger  # noqa: E402

LEVELS = ("L0", "L1", "mix")
ROOT = Path(__file__).resolve().parents[2]


def proc_dir(root: Path, step: int = 0) -> Path:
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return proc


def dump_of(root: Path, step: int = 0) -> dict:
    return json.loads((proc_dir(root, step) / "dump.json").read_text())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)))


def batch(seed: int = 0):
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))


def started(tmp_path: Path, level: str, model, **kwargs) -> PrecisionDebugger:
    """A debugger recording `model` into tmp_path after one forward and backward of it."""
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level, **kwargs)
    debugger.start(model)
    model(batch()).sum().backward()
    return debugger


def untouched() -> None:
    """Nothing of a debugger is left in torch: functionals and operators restored, no function mode."""
    assert torch.nn.functional.linear is torch._C._nn.linear
    assert torch.nn.functional.gelu is torch._C._nn.gelu
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__
    assert "msprobe" not in getattr(torch.nn.functional.softmax, "__module__", "") and \
        not hasattr(torch.nn.functional.softmax, "__wrapped__")
    assert _get_current_function_mode_stack() == []


# ------------------------------------------------------------------ 1. a step that raises before stop()
@pytest.mark.parametrize("level", LEVELS)
def test_a_step_that_raises_inside_step_scope_is_written_and_marked(tmp_path, level):
    model = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level)
    with pytest.raises(AssertionError, match="loss is nan"):
        with debugger.step_scope(model):
            loss = model(batch()).sum()
            loss.backward()
            assert torch.isnan(loss), "loss is nan"
    dump = dump_of(tmp_path)
    assert dump["incomplete"] == "the step raised AssertionError: loss is nan"
    names = list(dump["data"])
    if level != "L1":
        assert "Module.fc.Linear.forward.0" in names and "Module.fc.Linear.backward.0" in names
    if level != "L0":
        assert "Functional.linear.0.forward" in names and "Torch.tanh.0.forward" in names
    assert debugger.current_step == 1 and not debugger.running
    untouched()
    with debugger.step_scope(model):                 # the next step goes on as usual
        model(batch(1)).sum().backward()
    assert "incomplete" not in dump_of(tmp_path, 1)


def test_the_api_that_raised_is_recorded_with_its_inputs(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1")
    with pytest.raises(RuntimeError):
        with debugger.step_scope():
            torch.matmul(torch.ones(2, 3), torch.ones(2, 3))
    entry = dump_of(tmp_path)["data"]["Torch.matmul.0.forward"]
    assert entry["dump_error"].startswith("the call raised RuntimeError: ")
    assert [a["shape"] for a in entry["input_args"]] == [[2, 3], [2, 3]] and "output" not in entry


CRASHING_SCRIPT = """
import os, signal, sys, torch
from msprobe.pytorch import PrecisionDebugger
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.head(torch.tanh(self.fc(x)))
def batch():
    return torch.randn(3, 4)
model = Net()
debugger = PrecisionDebugger(dump_path={dump!r}, level={level!r})
{setup}
debugger.start(model)
loss = model(batch()).sum()
loss.backward()
{crash}
"""


def run_script(tmp_path: Path, level: str, crash: str, setup: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(CRASHING_SCRIPT.format(dump=str(tmp_path / "dump"), level=level, crash=crash, setup=setup))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


@pytest.mark.parametrize("level", LEVELS)
def test_an_uncaught_exception_before_stop_still_leaves_the_dump(tmp_path, level):
    """The plain start()/stop() form: the exit handler writes the step."""
    proc = run_script(tmp_path, level, "assert not torch.isfinite(loss), 'loss is finite'")
    assert proc.returncode == 1 and "AssertionError: loss is finite" in proc.stderr
    dump = dump_of(tmp_path / "dump")
    assert dump["incomplete"] == "the process exited before stop() was called"
    assert any(".backward" in n for n in dump["data"])
    assert json.loads((proc_dir(tmp_path / "dump") / "stack.json").read_text())
    assert not [n for n in os.listdir(proc_dir(tmp_path / "dump")) if n.startswith(".tmp")]


def test_sigterm_writes_the_step_then_the_process_dies_of_it(tmp_path):
    proc = run_script(tmp_path, "mix", "os.kill(os.getpid(), signal.SIGTERM); print('not reached')")
    assert proc.returncode == -signal.SIGTERM and "not reached" not in proc.stdout
    dump = dump_of(tmp_path / "dump")
    assert dump["incomplete"] == "the process received SIGTERM before stop() was called"
    assert "Module.fc.Linear.backward.0" in dump["data"] and "Functional.linear.0.forward" in dump["data"]


def test_sigterm_calls_the_scripts_own_handler_after_writing(tmp_path):
    setup = ("def handler(signum, frame):\n"
             "    print('own handler', os.path.exists({marker!r}), flush=True)\n"
             "    sys.exit(7)\n"
             "signal.signal(signal.SIGTERM, handler)").format(marker=str(tmp_path / "dump"))
    proc = run_script(tmp_path, "L1", "os.kill(os.getpid(), signal.SIGTERM)\nprint('after')", setup)
    assert proc.returncode == 7 and "own handler True" in proc.stdout and "after" not in proc.stdout
    assert dump_of(tmp_path / "dump")["incomplete"].startswith("the process received SIGTERM")


# ------------------------------------------------------------------ 2. stop() never raises, whatever it writes
class Padded(nn.Module):
    def forward(self, x, fill=2 ** 70):
        return F.pad(x, (1, 1), value=fill)       # torch takes the int for a float tensor


class PadNet(Net):
    def __init__(self):
        super().__init__()
        self.pad = Padded()

    def forward(self, x):
        return self.head(self.pad(torch.tanh(self.fc(x)), fill=2 ** 70)[:, 1:-1])


@pytest.mark.parametrize("level", LEVELS)
def test_a_python_int_beyond_64_bits_is_written_as_the_reference_writes_it(tmp_path, level):
    debugger = started(tmp_path, level, PadNet())
    z = F.pad(torch.ones(2, 2, dtype=torch.int64), (1, 1), value=2 ** 62)
    debugger.stop()
    raw = (proc_dir(tmp_path) / "dump.json").read_bytes()
    data = json.loads(raw)["data"]
    if level != "L1":
        assert data["Module.pad.Padded.forward.0"]["input_kwargs"]["fill"] == {"type": "int", "value": 2 ** 70}
    if level != "L0":
        assert data["Functional.pad.0.forward"]["input_kwargs"]["value"] == {"type": "int", "value": 2 ** 70}
        assert data["Functional.pad.1.forward"]["input_kwargs"]["value"] == {"type": "int", "value": 2 ** 62}
    assert b"1180591620717411303424" in raw
    assert z.shape == (2, 4)
    out = tmp_path / "cmp"
    assert run_cli(["compare", "-tp", proc_dir(tmp_path) / "dump.json", "-gp", proc_dir(tmp_path) / "dump.json",
                    "-o", out, "--csv"]) == 0


SURROGATE_FILE = "/tmp/caf\udce9-\udcff/train.py"       # a path whose bytes are not UTF-8


@pytest.mark.parametrize("level", LEVELS)
def test_code_in_a_directory_whose_name_is_not_utf8(tmp_path, level):
    model = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level)
    code = compile("loss = model(x).sum()\nloss.backward()\n", SURROGATE_FILE, "exec")
    debugger.start(model)
    exec(code, {"model": model, "x": batch()})              # noqa: S102 - frames with that file name
    debugger.stop()
    stacks = json.loads((proc_dir(tmp_path) / "stack.json").read_text())
    lines = [line for _, group in stacks.values() for line in group]
    assert any("File /tmp/caf\\xe9-\\xff/train.py, line 1" in line for line in lines)
    assert dump_of(tmp_path)["data"] and "incomplete" not in dump_of(tmp_path)


@pytest.mark.parametrize("level", LEVELS)
def test_a_full_disk_is_logged_once_and_training_goes_on(tmp_path, monkeypatch, level, msprobe_records):
    import msprobe.collect.writer as writer_module

    monkeypatch.setattr(writer_module, "FLUSH_BYTES", 1)          # every entry goes to the disk at once
    monkeypatch.setattr(writer_module._Members, "RESERVE", 512)
    real_save = torch.save

    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    expected = train_steps(Net(), None, 2)
    disk = FullDisk(monkeypatch, free=6000)
    monkeypatch.setattr(torch, "save", no_room)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level, task="tensor")
    got = train_steps(Net(), debugger, 2)
    monkeypatch.setattr(torch, "save", real_save)
    assert disk.refused
    assert_same(expected, got)
    dump = dump_of(tmp_path)                          # the closing part went into the space kept for it
    assert "No space left on device" in dump["incomplete"] and dump["data"]
    leaf = next(iter(leaves(dump["data"])))
    assert "data_name" not in leaf and leaf["dump_error"].startswith("tensor file: OSError")
    assert count_records(msprobe_records, "No space left on device") == 2     # dump.json, tensor files: once each


def train_steps(model, debugger, steps: int):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        if debugger:
            debugger.start(model)
        loss = model(batch(step)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger:
            debugger.stop()
            debugger.step()
        losses.append(loss.detach().clone())
    return losses, {k: v.clone() for k, v in model.state_dict().items()}


def assert_same(expected, got) -> None:
    assert all(torch.equal(a, b) for a, b in zip(expected[0], got[0]))
    assert all(torch.equal(expected[1][k], got[1][k]) for k in expected[1])


def leaves(value):
    if isinstance(value, dict) and value.get("type") == "torch.Tensor":
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)


# ------------------------------------------------------------------ 3. threads
@pytest.mark.parametrize("level", LEVELS)
def test_a_forward_in_another_thread_is_recorded(tmp_path, level, msprobe_records):
    model = Net()
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level)
    debugger.start(model)
    worker = threading.Thread(target=lambda: model(batch()).sum().backward())
    worker.start()
    worker.join()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda seed: model(batch(seed)), (1, 2)))
    debugger.stop()
    names = list(dump_of(tmp_path)["data"])
    if level != "L0":     # builtin functionals, torch functions: seen only through the function mode
        assert {"Functional.linear.0.forward", "Functional.linear.5.forward", "Torch.tanh.2.forward"} <= set(names)
        # the worker's `.sum()` outside the model is not seen: the log says so, once per thread
        assert "Tensor.sum.0.forward" not in names
        assert count_records(msprobe_records, "its APIs are recorded inside module forward calls") >= 2
    if level != "L1":
        assert {"Module.fc.Linear.forward.2", "Module.head.Linear.backward.0"} <= set(names)
    if level == "mix":
        construct = json.loads((proc_dir(tmp_path) / "construct.json").read_text())
        assert construct["Torch.tanh.0.forward"] is None                  # the root model is not a module entry
        assert construct["Functional.linear.1.forward"] == "Module.head.Linear.forward.0"
    untouched()


def test_a_thread_whose_calls_cannot_be_seen_is_named_in_the_log(tmp_path, msprobe_records):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1")
    debugger.start()                                             # no model: no forward call to follow

    def work():
        x = torch.ones(3)
        torch.exp(x)                    # not seen: torch's function mode is per thread
        return x + 1                    # a Tensor operator, wrapped for every thread

    worker = threading.Thread(target=work, name="loader-7")
    worker.start()
    worker.join()
    debugger.stop()
    assert list(dump_of(tmp_path)["data"]) == ["Tensor.__add__.0.forward"]
    assert count_records(msprobe_records, "thread 'loader-7' calls torch outside module forward calls") == 1


# ------------------------------------------------------------------ 4. two debuggers, stop() from another thread
def test_a_second_debugger_takes_over_and_nothing_stays_patched(tmp_path, msprobe_records):
    first = PrecisionDebugger(dump_path=str(tmp_path / "a"), level="L1")
    second = PrecisionDebugger(dump_path=str(tmp_path / "b"), level="L1")
    first.start()
    torch.ones(2) + 1
    second.start()                      # a notebook cell run again
    first.stop()                        # stopped already: nothing of the second's is touched
    torch.ones(2) * 3
    torch.exp(torch.ones(2))
    second.stop()
    untouched()
    assert list(dump_of(tmp_path / "a")["data"]) == ["Tensor.__add__.0.forward"]
    assert dump_of(tmp_path / "a")["incomplete"] == "another debugger started before stop() was called"
    assert list(dump_of(tmp_path / "b")["data"]) == ["Tensor.__mul__.0.forward", "Torch.exp.0.forward"]
    assert count_records(msprobe_records, "a second debugger started") == 1


def test_nested_start_and_stop_without_start_are_harmless(tmp_path):
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1")
    debugger.stop()
    debugger.step()                                  # stop() without start(); step() counts
    debugger.start()
    debugger.start()                                 # nested: ignored
    torch.ones(2) + 1
    debugger.stop()
    debugger.stop()
    untouched()
    assert list(dump_of(tmp_path, 1)["data"]) == ["Tensor.__add__.0.forward"]
    debugger.start()                                 # start() again in the same step adds to its files
    torch.ones(2) - 1
    debugger.stop()
    assert list(dump_of(tmp_path, 1)["data"]) == ["Tensor.__add__.0.forward", "Tensor.__sub__.0.forward"]


@pytest.mark.parametrize("level", LEVELS)
def test_stop_from_another_thread(tmp_path, level):
    model = Net()
    debugger = started(tmp_path, level, model)
    errors = []

    def stop():
        try:
            debugger.stop()
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            errors.append(exc)

    stopper = threading.Thread(target=stop)
    stopper.start()
    stopper.join()
    assert errors == [] and not debugger.running
    assert dump_of(tmp_path)["data"]
    model(batch(1))                                  # not recorded any more
    assert all(".forward.1" not in n and ".2.forward" not in n for n in dump_of(tmp_path)["data"])
    debugger.step()                                  # this thread's leftover (an inert mode entry) goes
    untouched()


# ------------------------------------------------------------------ 5. names are data
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.heads = nn.ModuleDict({"cls/main": nn.Linear(4, 3), "aux%1": nn.Linear(4, 1)})

    def forward(self, x):
        logits = self.heads["cls/main"](x)
        return {"loss/ce": F.cross_entropy(logits, torch.tensor([0, 1, 2])), "logits": logits,
                "aux%1": self.heads["aux%1"](x)}


class HeadNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Heads()

    def forward(self, x):
        out = self.body(x)
        return {"loss": out["loss/ce"] + out["aux%1"].mean(), "logits/raw": out["logits"]}


@pytest.mark.parametrize("level", LEVELS)
def test_slashes_in_dict_and_module_dict_keys_with_task_tensor(tmp_path, level):
    model = HeadNet()
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level, task="tensor")
    debugger.start(model)
    out = model(batch())
    out["loss"].backward()
    debugger.stop()
    directory = proc_dir(tmp_path)
    data = json.loads((directory / "dump.json").read_text())["data"]
    assert not [n for n, body in data.items() if "dump_error" in json.dumps(body)]
    if level != "L1":
        body = data["Module.body.Heads.forward.0"]
        assert list(body["output"][0]) == ["loss/ce", "logits", "aux%1"]
        assert body["output"][0]["loss/ce"]["data_name"] == "Module.body.Heads.forward.0.output.0.loss%2Fce.pt"
        assert "Module.body.heads.cls/main.Linear.forward.0" in data
        assert "Module.body.heads.cls/main.Linear.parameters_grad.0" in data
    saved = set(os.listdir(directory / "dump_tensor_data"))
    named = {leaf["data_name"] for leaf in leaves(data)}
    assert named == saved and all("/" not in n for n in saved)
    for name in named:
        torch.load(directory / "dump_tensor_data" / name, weights_only=True)
    assert run_cli(["compare", "-tp", directory / "dump.json", "-gp", directory / "dump.json", "-o",
                    tmp_path / "cmp", "--csv"]) == 0


def test_a_tensor_file_name_over_the_file_system_limit_is_shortened(tmp_path):
    model = nn.Sequential()
    inner = model
    for depth in range(30):                          # Module.a_very_long_name_0.a_very_long_name_1....
        child = nn.Sequential() if depth < 29 else nn.Linear(2, 2)
        inner.add_module(f"a_very_long_name_{depth}", child)
        inner = child
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L0", task="tensor")
    debugger.start(model)
    model(torch.ones(1, 2)).sum().backward()
    debugger.stop()
    data = dump_of(tmp_path)["data"]
    grads = [n for n in data if n.endswith("parameters_grad.0")]
    assert len(grads) == 1 and len(grads[0]) > 255
    names = [leaf["data_name"] for leaf in leaves(data[grads[0]])]
    assert len(names) == 2 and all(len(n.encode()) <= 255 and "~" in n for n in names)
    assert all((proc_dir(tmp_path) / "dump_tensor_data" / n).exists() for n in names)


# ------------------------------------------------------------------ 6. every dtype torch has
def every_dtype_tensor():
    """(dtype name, tensor) for every dtype torch has that a tensor can hold, with known values where it can."""
    values = torch.tensor([1.0, -2.0, 0.5, 4.0])
    made = {}
    for name in sorted(dir(torch)):
        dtype = getattr(torch, name)
        if not isinstance(dtype, torch.dtype) or dtype in made.values():
            continue
        if dtype.is_floating_point or dtype.is_complex:
            try:
                made[name] = values.to(dtype)
                continue
            except (RuntimeError, TypeError):
                pass
        if "qint" in name or "quint" in name:
            made[name] = torch.quantize_per_tensor(values, 0.5, 8 if name.startswith("quint") else 0, dtype)
            continue
        try:
            made[name] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 \
                else torch.tensor([1, 2, 3, 4]).to(dtype)
        except (RuntimeError, TypeError):
            made[name] = torch.zeros(4, dtype=dtype)
    return made


def test_every_dtype_gets_statistics():
    from msprobe.pytorch.stats import tensor_record

    checked = []
    for name, tensor in every_dtype_tensor().items():
        record = tensor_record(tensor)
        assert "dump_error" not in record, (name, record.get("dump_error"))
        assert record["Max"] is not None and record["Min"] is not None, name
        checked.append(name)
    assert {"float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64", "qint8", "quint8", "bits8", "uint4",
            "float4_e2m1fn_x2", "complex32", "bool"} <= set(checked)
    assert tensor_record(every_dtype_tensor()["float8_e4m3fn"])["Norm"] == pytest.approx((1 + 4 + 0.25 + 16) ** 0.5)
    big = torch.tensor([-1, 5], dtype=torch.int64).view(torch.uint64)
    assert tensor_record(big) | {"shape": None} == {"type": "torch.Tensor", "dtype": "torch.uint64", "shape": None,
                                                    "Max": 2 ** 64 - 1, "Min": 5, "Mean": None, "Norm": None,
                                                    "requires_grad": False}
    quantized = tensor_record(torch.quantize_per_tensor(torch.tensor([1.0, -2.0]), 0.5, 0, torch.qint8))
    assert (quantized["Max"], quantized["Min"], quantized["Mean"]) == (1.0, -2.0, -0.5)
    fp4 = torch.tensor([0x21, 0xF7], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)     # 0.5, 1 | 6, -6
    assert tensor_record(fp4) | {"Norm": 0} == {"type": "torch.Tensor", "dtype": "torch.float4_e2m1fn_x2",
                                               "shape": [2], "Max": 6.0, "Min": -6.0, "Mean": 0.375, "Norm": 0,
                                               "requires_grad": False}


def test_sparse_statistics_are_those_of_the_stored_values():
    from msprobe.pytorch.stats import tensor_crc32, tensor_record

    dense = torch.zeros(3, 4)
    dense[0, 1], dense[2, 3] = 5.0, -1.0
    for sparse in (dense.to_sparse(), dense.to_sparse_csr()):
        record = tensor_record(sparse, "md5")
        assert (record["shape"], record["Max"], record["Min"], record["Mean"]) == ([3, 4], 5.0, -1.0, 2.0)
        assert len(record["md5"]) == 8 and "dump_error" not in record
    assert tensor_crc32(dense.to_sparse()) != tensor_crc32((dense * 2).to_sparse())


@pytest.mark.parametrize("level", ("L0", "mix"))
def test_every_dtype_through_a_module(tmp_path, level):
    model = nn.Sequential(nn.Identity())
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level, summary_mode="md5")
    tensors = every_dtype_tensor()
    debugger.start(model)
    for tensor in tensors.values():
        model(tensor)
    debugger.stop()
    data = dump_of(tmp_path)["data"]
    records = [data[f"Module.0.Identity.forward.{i}"]["input_args"][0] for i in range(len(tensors))]
    assert [r["dtype"] for r in records] == [str(t.dtype) for t in tensors.values()]
    assert [r for r in records if "dump_error" in r or r["Max"] is None] == []


def test_a_statistics_failure_stores_one_line(tmp_path, monkeypatch, msprobe_records):
    import msprobe.pytorch.stats as stats

    def dispatcher_error(_tensor):
        raise NotImplementedError("Could not run 'aten::aminmax' with arguments\n" + "backend list\n" * 100)

    monkeypatch.setattr(stats, "numeric_form", dispatcher_error)
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1")
    debugger.start()
    torch.ones(2) + torch.ones(2)
    torch.ones(2) * 2
    debugger.stop()
    leaf = dump_of(tmp_path)["data"]["Tensor.__add__.0.forward"]["input_args"][0]
    assert leaf["dump_error"] == "statistics: NotImplementedError: Could not run 'aten::aminmax' with arguments"
    assert (leaf["Max"], leaf["dtype"], leaf["shape"]) == (None, "torch.float32", [2])
    assert count_records(msprobe_records, "aminmax") == 1


# ------------------------------------------------------------------ 7. dump_error never where readers expect data
class SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 4, sparse=True)
        self.head = nn.Linear(4, 2)

    def forward(self, ids):
        return self.head(self.emb(ids))


@pytest.mark.parametrize("level", ("L0", "mix"))
def test_a_sparse_parameter_gradient_is_recorded_and_the_dump_compares_and_graphs(tmp_path, level):
    model = SparseNet()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), level=level)
    debugger.start(model)
    model(torch.tensor([[1, 2, 2]])).sum().backward()
    debugger.stop()
    directory = proc_dir(tmp_path / "d")
    grad = json.loads((directory / "dump.json").read_text())["data"]["Module.emb.Embedding.parameters_grad.0"]
    stored = model.emb.weight.grad.coalesce().values()        # the statistics of the stored values
    assert list(grad) == ["weight"] and grad["weight"][0]["shape"] == [10, 4]
    assert (grad["weight"][0]["Max"], grad["weight"][0]["Min"]) == (stored.max().item(), stored.min().item())
    assert run_cli(["compare", "-tp", directory / "dump.json", "-gp", directory / "dump.json", "-o",
                    tmp_path / "cmp", "--csv"]) == 0
    assert run_cli(["graph", "-tp", directory, "-o", tmp_path / "graph"]) == 0


def test_a_failed_parameter_gradient_stays_in_its_own_record(tmp_path, monkeypatch):
    import msprobe.pytorch.hooks as hooks

    real = hooks.tensor_record

    def failing_for_sparse(tensor, *rest):
        if tensor.layout != torch.strided:
            raise RuntimeError("sparse tensors are not supported")
        return real(tensor, *rest)

    monkeypatch.setattr(hooks, "tensor_record", failing_for_sparse)
    model = SparseNet()
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "d"), level="L0")
    debugger.start(model)
    model(torch.tensor([[1, 2, 2]])).sum().backward()
    debugger.stop()
    directory = proc_dir(tmp_path / "d")
    grad = json.loads((directory / "dump.json").read_text())["data"]["Module.emb.Embedding.parameters_grad.0"]
    assert list(grad) == ["weight"]                               # the body holds parameters only
    assert grad["weight"][0]["dump_error"] == "value: RuntimeError: sparse tensors are not supported"
    assert run_cli(["compare", "-tp", directory / "dump.json", "-gp", directory / "dump.json", "-o",
                    tmp_path / "cmp", "--csv"]) == 0
    rows = read_csv(next((tmp_path / "cmp").glob("compare_result_*.csv")))
    header = rows[0]
    row = next(r for r in rows[1:] if r[0] == "Module.emb.Embedding.parameters_grad.0.weight")
    assert "not fully dumped: value: RuntimeError: sparse tensors are not supported" in row[header.index("Err_message")]
    assert run_cli(["graph", "-tp", directory, "-o", tmp_path / "graph"]) == 0


# ------------------------------------------------------------------ 8-10. configuration
@pytest.mark.parametrize("config, key", [({"taks": "tensor"}, "'taks'"),
                                         ({"statistics": {"scoope": ["linear"]}}, "'scoope'")])
def test_unknown_config_keys_are_refused_before_training(tmp_path, config, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"dump_path": str(tmp_path / "d"), **config}))
    with pytest.raises(DumpConfigError, match=f"unknown key {key}.*did you mean"):
        PrecisionDebugger(config_path=str(path))


def test_step_and_rank_ranges_stay_ranges(tmp_path):
    import time

    started = time.process_time()      # CPU time: a loaded machine must not fail it, a range made a list would
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level="L1", step=["0-100000000000"], rank=["0-3000000"])
    debugger.start()
    torch.ones(1) + 1
    debugger.stop()
    assert time.process_time() - started < 5
    assert list(dump_of(tmp_path)["data"]) == ["Tensor.__add__.0.forward"]


def test_config_path_must_be_a_path_and_dump_path_has_no_nul(tmp_path):
    read_end, write_end = os.pipe()
    os.write(write_end, b"{}")                      # what the descriptor holds would be read as a config
    os.close(write_end)
    try:
        for bad in (read_end, True):
            with pytest.raises(DumpConfigError, match="config_path must be a path"):
                PrecisionDebugger(config_path=bad)
        os.fstat(read_end)                          # the caller's descriptor is still open
        os.fstat(sys.stdout.fileno())               # and stdout too
    finally:
        os.close(read_end)
    with pytest.raises(DumpConfigError, match="NUL"):
        PrecisionDebugger(dump_path=str(tmp_path / "a\x00b"))


# ------------------------------------------------------------------ 11. TorchScript sub-modules
class Scripted(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)
        self.block = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(self.fc(x)))


@pytest.mark.parametrize("level", ("L0", "mix"))
def test_a_torchscript_sub_module_is_left_alone(tmp_path, level, msprobe_records):
    expected = train_steps(Scripted(), None, 2)
    model = Scripted()
    debugger = PrecisionDebugger(dump_path=str(tmp_path), level=level)
    got = train_steps(model, debugger, 2)
    assert_same(expected, got)
    names = list(dump_of(tmp_path, 1)["data"])
    assert "Module.head.Linear.backward.0" in names and "Module.fc.Linear.forward.0" in names
    assert not [n for n in names if "block" in n]
    assert count_records(msprobe_records, "block is a TorchScript module") == 1
    assert not model.fc._forward_pre_hooks and not model.head._forward_hooks      # every hook removed at stop()
    untouched()


# ------------------------------------------------------------------ a fork while recording (DataLoader workers)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_records_nothing_and_leaves_the_parents_files_alone(tmp_path):
    debugger = started(tmp_path, "mix", Net())
    pid = os.fork()
    if pid == 0:                         # the child: works with torch, then exits at once
        code = 0
        try:
            for _ in range(50):
                torch.ones(100) + 1
            code = 3 if debugger.running else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    torch.exp(torch.ones(2))
    debugger.stop()
    names = list(dump_of(tmp_path)["data"])
    assert names.count("Tensor.__add__.0.forward") == 0 and "Torch.exp.0.forward" in names
    assert "incomplete" not in dump_of(tmp_path)


def test_start_stop_and_step_called_on_the_class_act_on_the_newest_debugger(tmp_path):
    """The reference's start/stop/step are class methods: `PrecisionDebugger.start(model)` after the debugger was
    made (e.g. in another module) records with it."""
    model = Net()
    PrecisionDebugger(dump_path=str(tmp_path / "old"), level="L1")
    debugger = PrecisionDebugger(dump_path=str(tmp_path / "new"), level="L1")
    for seed in range(2):
        PrecisionDebugger.start(model)
        model(batch(seed)).sum().backward()
        PrecisionDebugger.stop()
        PrecisionDebugger.step()
    assert debugger.current_step == 2 and not list((tmp_path / "old").glob("step*"))
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["step0", "step1"]
    assert "Functional.linear.0.forward" in dump_of(tmp_path / "new", 1)["data"]
