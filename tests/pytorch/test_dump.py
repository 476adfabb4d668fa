"""PrecisionDebugger against the reference's TinyGPT dumps (same seeds, same config) and its error paths."""

from __future__ import annotations

import json
import math
import re
import sys
import zlib
from pathlib import Path

import pytest

from conftest import FIXTURES, read_csv, run_cli

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from msprobe.errors import MsprobeError  # noqa: E402
from msprobe.pytorch import DumpConfigError, PrecisionDebugger, seed_all  # noqa: E402

sys.path.insert(0, str(FIXTURES / "pytorch_model"))
from tiny_gpt import TinyGPT  # noqa: E402

SMALL = {"vocab": 32, "d_model": 16, "n_head": 2, "seq": 4}
DEFAULT = {"vocab": 64, "d_model": 32, "n_head": 4, "seq": 8}


def train(dump_path=None, steps=1, size=DEFAULT, debugger_kwargs=None, config_path=None, target=True):
    """The refdata dump_single.py loop for the TARGET variant (GOLDEN with target=False); returns (losses,
    model)."""
    torch.set_num_threads(1)
    seed_all(1234)
    model = TinyGPT(vocab=size["vocab"], d_model=size["d_model"], n_head=size["n_head"], n_layer=2,
                    max_seq=size["seq"], perturb_layer=0 if target else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    g = torch.Generator().manual_seed(42)
    data = [(torch.randint(0, size["vocab"], (2, size["seq"]), generator=g),
             torch.randint(0, size["vocab"], (2, size["seq"]), generator=g)) for _ in range(steps)]
    debugger = None
    if dump_path is not None or config_path is not None:
        debugger = PrecisionDebugger(config_path=config_path, dump_path=dump_path, **(debugger_kwargs or {}))
    losses = []
    for idx, tgt in data:
        if debugger:
            debugger.start(model=model)
        _, loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if debugger:
            debugger.stop()
            debugger.step()
        losses.append(loss.item())
    return losses, model


def our_dump(root: Path, step: int = 0) -> Path:
    (proc,) = [p for p in (root / f"step{step}").iterdir() if p.is_dir()]
    return proc


def load_data(path: Path) -> dict:
    return json.loads(path.read_text())["data"]


# Portability (docs/contributing.md): statistics computed on this machine are never compared bit-exactly with values
# recorded on another CPU. Reduction order differs between CPUs (AVX2, AVX-512, ARM) and thread counts, so a Mean
# that is 0 in exact arithmetic comes out as -7.45e-09 on one machine and -5.59e-09 on another. A statistic agrees
# when it lies within TOLERANCE of the tensor's own scale (max(|Max|, |Min|); the Norm's own magnitude for Norm).
# Adam divides each gradient by its own root mean square, so a near-zero gradient element whose last bit differs can
# move its update by up to lr: the optimizer's entries (construct parent "optimizer") are held to OPTIMIZER_TOLERANCE
# of the scale (measured: 5.7e-4 between AVX2 and AVX-512 on the refdata model). Everything else is portable and
# compared exactly: entry names and order, structure, types, dtypes, shapes, requires_grad, non-tensor values.
TOLERANCE = 1e-5
OPTIMIZER_TOLERANCE = 1e-2
STATISTICS = ("Max", "Min", "Mean", "Norm")


def optimizer_entries() -> frozenset:
    """Names of the entries recorded inside optimizer.step() (the same names at every level of the refdata run)."""
    construct = json.loads((FIXTURES / "stats_mix_step0" / "target" / "construct.json").read_text())
    return frozenset(name for name, parent in construct.items() if parent == "optimizer")


def statistic_scale(leaf: dict, key: str) -> float:
    if key == "Norm":
        return abs(leaf["Norm"])
    return max(abs(leaf["Max"]), abs(leaf["Min"]))


def statistics_agree(ref: dict, ours: dict, key: str, tolerance: float) -> bool:
    a, b = ref.get(key), ours.get(key)
    if not isinstance(a, float) or isinstance(b, bool) or not isinstance(b, (int, float)):
        return a == b   # None, bool, int statistics of integer tensors: exact
    if math.isnan(a) or math.isinf(a):
        return str(a) == str(b)
    return abs(a - b) <= tolerance * statistic_scale(ref, key)


def leaf_differences(ref, ours, path, out, tolerance=TOLERANCE, compare_md5=False):
    """Append every field where a reference leaf and ours differ: portable fields exactly, statistics within
    `tolerance` of the tensor's scale, md5 only when asked (CRC-32 of float results is not portable)."""
    if isinstance(ref, dict) and "type" in ref:
        for key in ("type", "dtype", "shape", "requires_grad", "value", "data_name"):
            if ref.get(key) != (ours or {}).get(key):
                out.append((path, key, ref.get(key), (ours or {}).get(key)))
        if compare_md5 and ref.get("md5") != (ours or {}).get("md5"):
            out.append((path, "md5", ref.get("md5"), (ours or {}).get("md5")))
        if ref.get("type") == "torch.Tensor" and ours:
            for key in STATISTICS:
                if not statistics_agree(ref, ours, key, tolerance):
                    out.append((path, key, ref.get(key), ours.get(key)))
    elif isinstance(ref, dict):
        if not isinstance(ours, dict) or list(ref) != list(ours):
            out.append((path, "keys", ref, ours))
            return
        for key in ref:
            leaf_differences(ref[key], ours[key], f"{path}.{key}", out, tolerance, compare_md5)
    elif isinstance(ref, list):
        if not isinstance(ours, list) or len(ref) != len(ours):
            out.append((path, "length", ref, ours))
            return
        for i, (a, b) in enumerate(zip(ref, ours)):
            leaf_differences(a, b, f"{path}.{i}", out, tolerance, compare_md5)
    elif ref != ours:
        out.append((path, "value", ref, ours))


def dump_differences(ref: dict, ours: dict) -> list:
    optimizer = optimizer_entries()
    differences = []
    for name in ref:
        tolerance = OPTIMIZER_TOLERANCE if name in optimizer else TOLERANCE
        leaf_differences(ref[name], ours[name], name, differences, tolerance)
    return differences


def tensor_leaves(value, path=""):
    """(path, leaf) of every tensor record in an entry body, in order."""
    if isinstance(value, dict) and "type" in value:
        if value["type"] == "torch.Tensor":
            yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensor_leaves(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from tensor_leaves(item, f"{path}.{i}")


def crc32_of(tensor) -> str:
    """CRC-32 of a tensor's bytes in row-major order, computed here independently of the collector."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return format(zlib.crc32(raw), "08x")


CASES = {  # fixture folder -> (level, summary_mode)
    "stats_L1_step0": ("L1", "statistics"),
    "stats_L0_step0": ("L0", "statistics"),
    "stats_mix_step0": ("mix", "statistics"),
    "md5_mix_step0": ("mix", "md5"),
}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    result = {}
    for case, (level, summary_mode) in CASES.items():
        root = tmp_path_factory.mktemp(case)
        config = {"task": "statistics", "dump_path": str(root / "dump"), "rank": [], "step": [], "level": level,
                  "extra_info": True, "async_dump": False,
                  "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}
        config_path = root / "config.json"
        config_path.write_text(json.dumps(config))
        train(config_path=str(config_path))
        result[case] = our_dump(root / "dump")
    return result


@pytest.fixture(scope="module")
def tensor_run(tmp_path_factory):
    """Our own mix dump of real tensors, made in this process with the same seeds as `dumps` (DEFAULT size)."""
    root = tmp_path_factory.mktemp("tensor_run")
    train(dump_path=str(root / "dump"), debugger_kwargs={"task": "tensor", "level": "mix"})
    return our_dump(root / "dump")


@pytest.mark.parametrize("case", list(CASES))
def test_matches_reference_dump(dumps, case):
    ref = load_data(FIXTURES / case / "target" / "dump.json")
    ours = load_data(dumps[case] / "dump.json")
    assert list(ours) == list(ref)             # every reference entry, in the reference's order
    assert dump_differences(ref, ours) == []


def test_md5_is_the_crc32_of_the_tensors_of_the_same_run(dumps, tensor_run):
    """The CRC-32 of a float result is not portable, so our md5 dump is checked against the tensors that our own
    tensor-mode run of the same model saved in this process, and against the reference only where it is portable."""
    md5_dump = load_data(dumps["md5_mix_step0"] / "dump.json")
    tensor_dump = load_data(tensor_run / "dump.json")
    assert list(md5_dump) == list(tensor_dump)
    checked = 0
    for name, body in md5_dump.items():
        md5_leaves = list(tensor_leaves(body))
        saved_leaves = list(tensor_leaves(tensor_dump[name]))
        assert [path for path, _ in md5_leaves] == [path for path, _ in saved_leaves], name
        for (path, leaf), (_, saved) in zip(md5_leaves, saved_leaves):
            tensor = torch.load(tensor_run / "dump_tensor_data" / saved["data_name"], weights_only=True)
            assert (leaf["dtype"], leaf["shape"]) == (str(tensor.dtype), list(tensor.shape)), name + path
            assert leaf["md5"] == crc32_of(tensor), name + path
            checked += 1
    assert checked > 1000
    # integer inputs (the token ids) are the same bytes on every machine: there the reference's CRC-32 must agree
    ref = load_data(FIXTURES / "md5_mix_step0" / "target" / "dump.json")
    ids = ref["Functional.embedding.0.forward"]["input_args"][0]
    assert ids["dtype"] == "torch.int64"
    assert md5_dump["Functional.embedding.0.forward"]["input_args"][0]["md5"] == ids["md5"]


def test_statistics_are_those_of_the_saved_tensors(tensor_run):
    """Every statistic of our tensor-mode dump, recomputed in float64 from the tensor the same run saved."""
    data = load_data(tensor_run / "dump.json")
    checked = 0
    for name, body in data.items():
        for path, leaf in tensor_leaves(body):
            tensor = torch.load(tensor_run / "dump_tensor_data" / leaf["data_name"], weights_only=True)
            if not tensor.is_floating_point() or tensor.numel() == 0:
                continue
            values = tensor.double()
            expected = {"Max": values.max().item(), "Min": values.min().item(), "Mean": values.mean().item(),
                        "Norm": values.norm().item()}
            # float32 accumulation, and low-precision statistics rounded back to the tensor's dtype
            tolerance = max(TOLERANCE, 2 * torch.finfo(tensor.dtype).eps)
            for key in STATISTICS:
                if math.isfinite(expected[key]) and math.isfinite(statistic_scale(expected, key)):
                    assert abs(leaf[key] - expected[key]) <= tolerance * statistic_scale(expected, key), (name + path, key)
                else:   # a masked fill with -inf: the same non-finite value
                    assert str(leaf[key]) == str(expected[key]) or leaf[key] == expected[key], (name + path, key)
            checked += 1
    assert checked > 1000


def test_layout_and_side_files(dumps):
    directory = dumps["stats_mix_step0"]
    assert directory.name.startswith("proc") and directory.parent.name == "step0"
    dump = json.loads((directory / "dump.json").read_text())
    assert {k: dump[k] for k in ("task", "level", "framework", "dump_data_dir")} == {
        "task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": None}
    construct = json.loads((directory / "construct.json").read_text())
    assert construct["Functional.linear.2.forward"] == "Module.blocks.0.mlp.fc1.CastLinear.forward.0"
    assert construct["Module.blocks.0.mlp.fc1.CastLinear.forward.0"] == "Module.blocks.0.mlp.MLP.forward.0"
    assert construct["Tensor.to.0.forward"] == "Module.blocks.0.mlp.fc1.CastLinear.forward.0"  # counted only
    assert "Tensor.to.0.forward" not in dump["data"]
    stack = json.loads((directory / "stack.json").read_text())
    groups = {name: lines for names, lines in stack.values() for name in names}
    assert groups["Functional.linear.2.forward"][0].startswith("File ")
    assert "tiny_gpt.py" in groups["Functional.linear.2.forward"][0]
    assert json.loads((dumps["stats_L1_step0"] / "construct.json").read_text()) == {}


def test_our_compare_reads_our_dump(dumps, tmp_path):
    target = dumps["stats_mix_step0"] / "dump.json"
    golden = FIXTURES / "stats_mix_step0" / "target" / "dump.json"
    assert run_cli(["compare", "-tp", str(target), "-gp", str(golden), "-o", str(tmp_path / "out"), "--csv"]) == 0
    (csv_path,) = list((tmp_path / "out").glob("compare_result_*.csv"))
    rows = read_csv(csv_path)
    header, body = rows[0], rows[1:]
    assert len(body) == 1350
    bench = header.index("Bench Name")
    assert all(row[bench] not in ("N/A", "") for row in body)
    # our statistics against the reference collector's, recorded on another machine: within the tensor's scale
    column = {key: header.index(key) for key in ("NPU Name", "Max diff", "NPU max", "NPU min")}
    optimizer = optimizer_entries()
    checked = 0
    for row in body:
        diff, high, low = (row[column[key]].strip() for key in ("Max diff", "NPU max", "NPU min"))
        try:
            diff, scale = abs(float(diff)), max(abs(float(high)), abs(float(low)))
        except ValueError:
            continue     # N/A, None: non-tensor and non-float rows
        if math.isnan(diff):
            continue
        api = re.match(r"(.*?\.(?:forward|backward))\.", row[column["NPU Name"]])
        entry = api.group(1) if api else row[column["NPU Name"]]
        assert diff <= (OPTIMIZER_TOLERANCE if entry in optimizer else TOLERANCE) * scale, row[column["NPU Name"]]
        checked += 1
    assert checked > 1000


def test_tensor_mode_matches_reference(tmp_path, tensor_mix):
    ref_json = Path(tensor_mix[0])
    train(dump_path=str(tmp_path / "dump"), size=SMALL, debugger_kwargs={"task": "tensor", "level": "mix"})
    directory = our_dump(tmp_path / "dump")
    dump = json.loads((directory / "dump.json").read_text())
    assert dump["dump_data_dir"] == str(directory / "dump_tensor_data")
    ref, ours = load_data(ref_json), dump["data"]
    assert list(ours) == list(ref)
    assert dump_differences(ref, ours) == []
    ref_dir, our_dir = ref_json.parent / "dump_tensor_data", directory / "dump_tensor_data"
    assert sorted(p.name for p in our_dir.iterdir()) == sorted(p.name for p in ref_dir.iterdir())
    for name in ("Functional.linear.2.forward.input.0.pt", "Module.blocks.0.mlp.fc1.CastLinear.parameters_grad.0.weight.pt",
                 "Functional.linear.5.backward.output.0.pt", "Functional.softmax.0.forward.output.0.pt"):
        a = torch.load(ref_dir / name, weights_only=True)
        b = torch.load(our_dir / name, weights_only=True)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        # values recorded on another CPU: equal within the tensor's scale, never bit for bit
        assert (a.double() - b.double()).abs().max() <= TOLERANCE * a.double().abs().max(), name


def test_debugger_does_not_change_training(tmp_path):
    plain_losses, plain_model = train(steps=2)
    dumped_losses, dumped_model = train(dump_path=str(tmp_path / "d"), steps=2,
                                        debugger_kwargs={"task": "statistics", "level": "mix"})
    assert plain_losses == dumped_losses
    for (name, a), (_, b) in zip(plain_model.named_parameters(), dumped_model.named_parameters()):
        assert torch.equal(a, b), name
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["step0", "step1"]
    # hooks are gone after stop(): the functional namespace and Tensor operators are restored
    assert torch.nn.functional.linear is torch._C._nn.linear
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__


def test_step_filter_and_data_mode(tmp_path):
    train(dump_path=str(tmp_path / "d"), steps=2,
          debugger_kwargs={"level": "L1", "step": [1], "data_mode": ["forward"], "list": ["linear"]})
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["step1"]
    data = load_data(our_dump(tmp_path / "d", 1) / "dump.json")
    assert list(data) == [f"Functional.linear.{i}.forward" for i in range(9)]


@pytest.mark.parametrize("kwargs, message", [
    ({"task": "overflow_check"}, "task"),
    ({"level": "L2"}, "level"),
    ({"step": [1, "x"]}, "step"),
    ({"step": 3}, "step"),
    ({"rank": [-1]}, "rank"),
    ({"data_mode": ["sideways"]}, "data_mode"),
    ({"summary_mode": "xor"}, "summary_mode"),
    ({"async_dump": True}, "async_dump"),
    ({"colour": "red"}, "colour"),
])
def test_invalid_config(tmp_path, kwargs, message):
    with pytest.raises(DumpConfigError, match=message) as info:
        PrecisionDebugger(dump_path=str(tmp_path / "d"), **kwargs)
    assert isinstance(info.value, MsprobeError)


def test_unwritable_dump_path_and_bad_config_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DumpConfigError, match="dump_path"):
        PrecisionDebugger(dump_path=str(blocker / "sub"))
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(DumpConfigError, match="not valid JSON"):
        PrecisionDebugger(config_path=str(bad))
    with pytest.raises(MsprobeError, match="model"):
        PrecisionDebugger(dump_path=str(tmp_path / "d"), level="mix").start()


def test_hook_error_is_logged_once_and_marked(tmp_path, monkeypatch, caplog):
    import msprobe.pytorch.hooks as hooks

    real = hooks.tensor_record

    def flaky(tensor, *rest):
        if tensor.dtype == torch.bool:
            raise RuntimeError("boom")
        return real(tensor, *rest)

    monkeypatch.setattr(hooks, "tensor_record", flaky)
    plain_losses, _ = train(steps=1)
    losses, _ = train(dump_path=str(tmp_path / "d"), debugger_kwargs={"level": "L1"})
    assert losses == plain_losses
    data = load_data(our_dump(tmp_path / "d") / "dump.json")
    marked = [name for name, body in data.items() if "dump_error" in body]
    assert marked == ["Tensor.__eq__.0.forward", "Tensor.masked_fill.0.forward",
                      "Tensor.__eq__.1.forward", "Tensor.masked_fill.1.forward"]
    assert data["Tensor.masked_fill.0.forward"]["dump_error"] == "input: RuntimeError: boom"
    assert "output" in data["Tensor.masked_fill.0.forward"]
    # logged once per (error, section), not per entry (read from the records: whether msprobe's console handler is
    # installed depends on what ran before in this process)
    assert sum("boom" in record.getMessage() for record in caplog.records) == 2


def test_working_marks_the_thread_busy_and_restores_it_however_the_block_ends():
    """Collector.working, the one busy guard of the hooks: APIs called inside are not recorded, and the state
    before it comes back after a nested block, an exception, or a block entered while already busy."""
    from types import SimpleNamespace

    from msprobe.pytorch.hooks import Collector

    state = SimpleNamespace(busy=False)
    with pytest.raises(RuntimeError):
        with Collector.working(state):
            assert state.busy
            with Collector.working(state):
                assert state.busy
            assert state.busy                   # the inner block restores busy, not idle
            raise RuntimeError("a failing API")
    assert state.busy is False
