"""The MindSpore/PyTorch twin zoo (tests/fixtures/cross_zoo/make.py) dumped by the REFERENCE's collectors
(mindstudio-probe, PyPI) and compared by ours: do `msprobe compare -am` and `-da` pair, stay calm and name the planted
op on dumps another tool wrote, and on mixed pairs (one side ours, the other the reference's)?

Not part of the test suite: it needs two environments of the reference (MindSpore and PyTorch, each with
mindstudio-probe installed; the reference's MindSpore statistics call mint.norm, which has no CPU kernel, so the
dumping worker replaces it by a numpy L2 norm first, as one would to run it on CPU at all).

    # 1. dump (each case and level in its own process: the reference's debugger is a process-wide singleton)
    python benchmarks/cross_zoo_reference.py dump --ms-python REF_MS/bin/python --pt-python REF_PT/bin/python \\
        --out /tmp/refzoo
    # 2. compare with ours (the project's environment; our own twin dumps come from tests/fixtures/cross_zoo.tar.gz)
    PYTHONPATH=. python benchmarks/cross_zoo_reference.py compare --out /tmp/refzoo [--json figures.json]

Pairs: ref-MS vs ref-PT, ref-MS vs our-PT, our-MS vs ref-PT (target vs golden), at levels L1 and mix. Per pair:
warning/error rows (0 on a clean pair), whether the compare's culprit (which -da reads) names the planted op, and
the share of the target's rows matched.

The `worker` sub-command is what the reference's interpreters run; it imports nothing of this project but make.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "fixtures" / "cross_zoo"
OURS = ROOT / "tests" / "fixtures" / "cross_zoo.tar.gz"


def _make():
    sys.path.insert(0, str(ZOO))
    import make

    return make


# ------------------------------------------------------------------ worker: runs in the reference's environment
def _reference_debugger(framework: str, out_dir: Path):
    """A stand-in for our PrecisionDebugger(dump_path=, level=) that make.py calls: the reference's debugger,
    configured through a config.json as its users do (statistics, all data), written on stop()."""
    if framework == "mindspore":
        import numpy as np
        from mindspore import Tensor, mint

        def cpu_norm(x, *args, **kwargs):  # the reference's statistics call mint.norm: no CPU kernel
            arr = x.asnumpy()
            return Tensor(np.asarray(np.linalg.norm(arr.astype(np.float64).ravel()), dtype=arr.dtype))

        mint.norm = cpu_norm
        import msprobe.mindspore as package
    else:
        import msprobe.pytorch as package
    reference = package.PrecisionDebugger

    class Debugger:
        def __init__(self, dump_path, level):
            config = {"task": "statistics", "dump_path": str(dump_path), "rank": [], "step": [], "level": level,
                      "async_dump": False,
                      "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
            path = out_dir / f"config_{level}.json"
            path.write_text(json.dumps(config), encoding="utf-8")
            self.debugger = reference(config_path=str(path))

        def start(self, model):
            self.debugger.start(model)

        def stop(self):
            self.debugger.stop()
            self.debugger.step()

    package.PrecisionDebugger = Debugger


def worker(framework: str, case: str, level: str, out: Path, ours: bool) -> None:
    make = _make()
    out.mkdir(parents=True, exist_ok=True)
    if not ours:
        _reference_debugger(framework, out)
    make.HERE = out
    if hasattr(make, "LOSSES"):      # the clean twins' losses, kept beside the dumps, not in the fixture's folder
        make.LOSSES = out / "losses.json"
    make.LEVELS = (level,)
    sys.argv = [sys.argv[0], framework]
    if case.startswith("gate_"):
        (run_gate_mindspore if framework == "mindspore" else run_gate_pytorch)(make, case, level)
    elif case in EXTRA or case in EXTRA_GOLDEN:
        (run_llama_mindspore if framework == "mindspore" else run_llama_pytorch)(make, case, level)
    elif framework == "mindspore":
        make.CASES = {case: make.CASES[case]}
        make.run_mindspore()
    else:
        model, variant = case.split("_", 1)
        make.GOLDEN = {(model, variant)}
        make.run_pytorch()


def _step_mindspore(make, model, inputs: tuple, name: str, level: str) -> None:
    """One training step (forward and backward) of a MindSpore model under the PrecisionDebugger that msprobe.mindspore
    holds now (the reference's, or ours), kept as make.py keeps it."""
    import mindspore as ms
    from mindspore import Tensor

    from msprobe.mindspore import PrecisionDebugger

    grad_fn = ms.value_and_grad(model, None, model.trainable_params())
    with tempfile.TemporaryDirectory() as tmp:
        debugger = PrecisionDebugger(dump_path=tmp, level=level)
        debugger.start(model)
        loss, _ = grad_fn(*(Tensor(v) for v in inputs))
        debugger.stop()
        make.keep(Path(tmp), name)
    print(name, float(loss))


def _step_pytorch(make, model, inputs: tuple, name: str, level: str) -> None:
    """The same for a PyTorch model."""
    import torch

    from msprobe.pytorch import PrecisionDebugger

    with tempfile.TemporaryDirectory() as tmp:
        debugger = PrecisionDebugger(dump_path=tmp, level=level)
        debugger.start(model)
        loss = model(*(torch.from_numpy(v) for v in inputs))
        loss.backward()
        debugger.stop()
        make.keep(Path(tmp), name)
    print(name, float(loss))


# ------------------------------------------------------------------ a model make.py has not: mint APIs, Llama-like
# (hand-written RMSNorm with mint.rsqrt, mint.nn.Linear without bias, SiLU gate, mint.matmul attention), input and
# target random, loss mean square error. Same protocol as make.CASES: case -> (model, golden variant, bug, text of
# the culprit the verdict must name).
EXTRA = {
    "llama_clean": ("llama", "plain", None, None),
    "llama_rms_eps": ("llama", "plain", "rms_eps", "add"),
    "llama_softmax_axis": ("llama", "plain", "softmax_axis", "softmax"),
    "llama_scale": ("llama", "plain", "scale", "mul"),
    "llama_fp16_linear": ("llama", "plain", "fp16_linear", "linear"),
    # mint.nn.Linear, nn.LayerNorm, MindSpore's default GELU (tanh; PyTorch's approximate="tanh"), mint.cat, mint.tanh,
    # mint.sigmoid
    "gate_clean": ("gate", "plain", None, None),
    "gate_erf_gelu": ("gate", "plain", "erf_gelu", "gelu"),
    "gate_ln_eps": ("gate", "plain", "eps", "layer_norm"),
    "gate_sub_order": ("gate", "plain", "sub_order", "sub"),
}
EXTRA_GOLDEN = {"llama_plain", "gate_plain"}
L_D, L_HEADS, L_SEQ, L_BATCH, L_FFN = 16, 2, 6, 2, 32


def llama_weights() -> dict:
    import numpy as np

    rng = np.random.default_rng(44)

    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {"norm1.weight": 1 + w(L_D, scale=0.1), "norm2.weight": 1 + w(L_D, scale=0.1)}
    for name in ("q", "k", "v", "o"):
        out[f"attn.{name}.weight"] = w(L_D, L_D)
    out.update({"mlp.gate.weight": w(L_FFN, L_D), "mlp.up.weight": w(L_FFN, L_D), "mlp.down.weight": w(L_D, L_FFN)})
    rng = np.random.default_rng(8)
    x = rng.standard_normal((L_BATCH, L_SEQ, L_D)).astype(np.float32)
    return out, x, rng.standard_normal((L_BATCH, L_SEQ, L_D)).astype(np.float32)


def run_llama_mindspore(make, case: str, level: str) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import Parameter, Tensor, mint, nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    bug = EXTRA[case][2]

    class RMSNorm(nn.Cell):
        def __init__(self, eps):
            super().__init__()
            self.eps = eps
            self.weight = Parameter(Tensor(np.ones(L_D, np.float32)), name="weight")

        def construct(self, x):
            var = mint.mean(mint.mul(x, x), -1, keepdim=True)
            return mint.mul(mint.mul(x, mint.rsqrt(mint.add(var, self.eps))), self.weight)

    class Attention(nn.Cell):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (mint.nn.Linear(L_D, L_D, bias=False) for _ in range(4))

        def heads(self, t):
            return t.reshape(L_BATCH, L_SEQ, L_HEADS, L_D // L_HEADS).permute(0, 2, 1, 3)

        def construct(self, h):
            q, k, v = self.heads(self.q(h)), self.heads(self.k(h)), self.heads(self.v(h))
            scale = (2.0 if bug == "scale" else 1.0) / (L_D // L_HEADS) ** 0.5
            att = mint.mul(mint.matmul(q, mint.transpose(k, -2, -1)), scale)
            att = mint.nn.functional.softmax(att, dim=-2 if bug == "softmax_axis" else -1)
            y = mint.matmul(att, v).permute(0, 2, 1, 3).reshape(L_BATCH, L_SEQ, L_D)
            return self.o(y)

    class Mlp(nn.Cell):
        def __init__(self):
            super().__init__()
            self.gate, self.up = mint.nn.Linear(L_D, L_FFN, bias=False), mint.nn.Linear(L_D, L_FFN, bias=False)
            self.down = mint.nn.Linear(L_FFN, L_D, bias=False)

        def construct(self, h):
            if bug == "fp16_linear":
                up = mint.nn.functional.linear(h.to(ms.float16), self.up.weight.to(ms.float16)).to(ms.float32)
            else:
                up = self.up(h)
            return self.down(mint.mul(mint.nn.functional.silu(self.gate(h)), up))

    class Llama(nn.Cell):
        def __init__(self):
            super().__init__()
            self.norm1 = RMSNorm(0.3 if bug == "rms_eps" else 1e-5)
            self.attn = Attention()
            self.norm2 = RMSNorm(1e-5)
            self.mlp = Mlp()

        def construct(self, x, target):
            x = mint.add(x, self.attn(self.norm1(x)))
            x = mint.add(x, self.mlp(self.norm2(x)))
            d = mint.sub(x, target)
            return mint.mean(mint.mul(d, d))

    values, x, t = llama_weights()
    model = Llama()
    for param in model.get_parameters():
        param.set_data(Tensor(values[param.name]))
    _step_mindspore(make, model, (x, t), f"ms_{case}_{level}", level)


def run_llama_pytorch(make, case: str, level: str) -> None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(1)

    class RMSNorm(nn.Module):
        def __init__(self, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(L_D))

        def forward(self, x):
            var = torch.mean(torch.mul(x, x), -1, keepdim=True)
            return torch.mul(torch.mul(x, torch.rsqrt(torch.add(var, self.eps))), self.weight)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(L_D, L_D, bias=False) for _ in range(4))

        def heads(self, t):
            return t.reshape(L_BATCH, L_SEQ, L_HEADS, L_D // L_HEADS).permute(0, 2, 1, 3)

        def forward(self, h):
            q, k, v = self.heads(self.q(h)), self.heads(self.k(h)), self.heads(self.v(h))
            att = torch.mul(torch.matmul(q, torch.transpose(k, -2, -1)), 1.0 / (L_D // L_HEADS) ** 0.5)
            y = torch.matmul(F.softmax(att, dim=-1), v).permute(0, 2, 1, 3).reshape(L_BATCH, L_SEQ, L_D)
            return self.o(y)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate, self.up = nn.Linear(L_D, L_FFN, bias=False), nn.Linear(L_D, L_FFN, bias=False)
            self.down = nn.Linear(L_FFN, L_D, bias=False)

        def forward(self, h):
            return self.down(torch.mul(F.silu(self.gate(h)), self.up(h)))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.attn, self.norm2, self.mlp = RMSNorm(1e-5), Attention(), RMSNorm(1e-5), Mlp()

        def forward(self, x, target):
            x = torch.add(x, self.attn(self.norm1(x)))
            x = torch.add(x, self.mlp(self.norm2(x)))
            d = torch.sub(x, target)
            return torch.mean(torch.mul(d, d))

    values, x, t = llama_weights()
    model = Llama()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in values.items()})
    _step_pytorch(make, model, (x, t), f"pt_{case}_{level}", level)


def gate_weights() -> tuple:
    import numpy as np

    rng = np.random.default_rng(45)

    def w(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    values = {"fc1.weight": w(16, 8), "fc1.bias": w(16, scale=0.1), "ln.weight": 1 + w(16, scale=0.1),
              "ln.bias": w(16, scale=0.1), "fc2.weight": w(4, 32), "fc2.bias": w(4, scale=0.1)}
    return values, w(6, 8, scale=1.0), (rng.random((6, 4)) > 0.5).astype(np.float32)


def run_gate_mindspore(make, case: str, level: str) -> None:
    import mindspore as ms
    from mindspore import Tensor, mint, nn

    ms.set_context(mode=ms.PYNATIVE_MODE)
    bug = EXTRA[case][2]

    class Gate(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc1 = mint.nn.Linear(8, 16)
            self.ln = nn.LayerNorm((16,), epsilon=0.3 if bug == "eps" else 1e-5)
            self.act = nn.GELU(approximate=bug != "erf_gelu")
            self.fc2 = mint.nn.Linear(32, 4)

        def construct(self, x, target):
            h = self.act(self.ln(self.fc1(x)))
            y = mint.sigmoid(self.fc2(mint.cat((h, mint.tanh(h)), -1)))
            d = mint.sub(target, y) if bug == "sub_order" else mint.sub(y, target)
            return mint.mean(mint.mul(d, d))

    values, x, t = gate_weights()
    model = Gate()
    for param in model.get_parameters():
        head, _, leaf = param.name.rpartition(".")
        param.set_data(Tensor(values[f"{head}.{make.MS_NAMES.get(leaf, leaf)}"]))
    _step_mindspore(make, model, (x, t), f"ms_{case}_{level}", level)


def run_gate_pytorch(make, case: str, level: str) -> None:
    import torch
    from torch import nn

    torch.set_num_threads(1)

    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.ln, self.act, self.fc2 = (nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(approximate="tanh"),
                                                     nn.Linear(32, 4))

        def forward(self, x, target):
            h = self.act(self.ln(self.fc1(x)))
            d = torch.sub(torch.sigmoid(self.fc2(torch.cat((h, torch.tanh(h)), -1))), target)
            return torch.mean(torch.mul(d, d))

    values, x, t = gate_weights()
    model = Gate()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in values.items()})
    _step_pytorch(make, model, (x, t), f"pt_{case}_{level}", level)


# ------------------------------------------------------------------ dump: drives the workers
def dump(ms_python: str, pt_python: str, out: Path, only: list[str], ours: bool) -> None:
    """Every case and level of make.py (by the reference's collectors; ours have theirs in the fixture) and of EXTRA
    (by the collectors asked for)."""
    make = _make()
    jobs = [] if ours else [("mindspore", case) for case in make.CASES] + [
        ("pytorch", f"{m}_{v}") for m, v in sorted(make.GOLDEN)]
    jobs += [("mindspore", case) for case in EXTRA] + [("pytorch", case) for case in sorted(EXTRA_GOLDEN)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the reference's msprobe, not ours
    if ours:
        env["PYTHONPATH"] = str(ROOT)
    for framework, case in jobs:
        if only and not case.startswith(tuple(only)):
            continue
        for level in make.LEVELS:
            side = "ms" if framework == "mindspore" else "pt"
            if (out / f"{side}_{case}_{level}" / "dump.json").exists():
                continue
            start = time.time()
            python = ms_python if framework == "mindspore" else pt_python
            command = [python, __file__, "worker", framework, case, level, str(out)] + (["--ours"] if ours else [])
            run = subprocess.run(command, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True)
            tail = (run.stdout + run.stderr).strip().splitlines()[-1:] if run.returncode else []
            print(f"{side} {case} {level}: rc {run.returncode} {time.time() - start:.0f}s {' '.join(tail)}",
                  flush=True)


# ------------------------------------------------------------------ compare: our msprobe on every pair
def _figures(target: Path, golden: Path, want: str | None) -> dict:
    import msprobe
    from msprobe.compare.mapping import UNMATCHED_OTHER

    result = msprobe.compare(target, golden, api_mapping=True)
    analysis = msprobe.diff_analyze(target, golden, api_mapping=True)
    rows = result.rows
    matched = sum(r["Bench Name"] != "N/A" for r in rows)
    other = sum(r["Bench Name"] == "N/A" and UNMATCHED_OTHER.split("{op}")[0] in r["Err_message"] for r in rows)
    culprit = result.summary.first_error
    figures = {"rows": len(rows), "matched": matched, "matchable": matched + other,
               "warning": result.summary.counts["warning"], "error": result.summary.counts["error"],
               "culprit": culprit, "da_culprit": analysis.culprit["op_name"],
               "named": None if want is None else bool(culprit and want in culprit)}
    if json.loads(target.with_name("construct.json").read_text(encoding="utf-8")):     # -lm needs the tree (mix)
        layered = msprobe.compare(target, golden, layer_mapping=True).summary
        figures.update(lm_alarms=layered.counts["warning"] + layered.counts["error"], lm_culprit=layered.first_error,
                       lm_named=None if want is None else bool(layered.first_error and want in layered.first_error))
    return figures


def compare(out: Path, ours: Path | None) -> dict:
    """ours: our collectors' dumps of EXTRA (`dump --ours`); make.py's come from the fixture."""
    make = _make()
    our_zoo = Path(tempfile.mkdtemp(prefix="cross_zoo_ours_"))
    with tarfile.open(OURS) as tar:
        tar.extractall(our_zoo, filter="data")
    if ours is not None:
        for folder in ours.iterdir():
            if folder.is_dir() and not (our_zoo / folder.name).exists():
                (our_zoo / folder.name).symlink_to(folder.resolve())
    sides = {"ref": out, "our": our_zoo}
    figures = {}
    for case, (model, variant, _, want) in {**make.CASES, **EXTRA}.items():
        for level in make.LEVELS:
            for t_side, g_side in (("ref", "ref"), ("ref", "our"), ("our", "ref")):
                target = sides[t_side] / f"ms_{case}_{level}" / "dump.json"
                golden = sides[g_side] / f"pt_{model}_{variant}_{level}" / "dump.json"
                if not (target.exists() and golden.exists()):
                    continue
                key = f"{t_side}-MS/{g_side}-PT {case} {level}"
                figures[key] = _figures(target, golden, want)
                print(key, json.dumps(figures[key]), flush=True)
    return figures


def summary(figures: dict) -> None:
    by_pair: dict = {}
    for key, f in figures.items():
        pair, case, level = key.split()
        p = by_pair.setdefault(pair, {"clean_alarms": 0, "clean": 0, "named": 0, "bugs": 0, "matched": 0,
                                      "matchable": 0, "rows": 0, "lm_alarms": 0, "lm_named": 0, "lm_bugs": 0})
        if f["named"] is None:
            p["clean"] += 1
            p["clean_alarms"] += f["warning"] + f["error"]
            p["lm_alarms"] += f.get("lm_alarms", 0)
            p["matched"] += f["matched"]
            p["matchable"] += f["matchable"]
            p["rows"] += f["rows"]
        else:
            p["bugs"] += 1
            p["named"] += f["named"]
            p["lm_bugs"] += "lm_named" in f
            p["lm_named"] += bool(f.get("lm_named"))
    for pair, p in by_pair.items():
        print(f"{pair}: clean pairs {p['clean']} with {p['clean_alarms']} warning/error rows; culprit named "
              f"{p['named']}/{p['bugs']}; clean rows matched {p['matched']}/{p['rows']} "
              f"({p['matched']}/{p['matchable']} of those with a golden counterpart); -lm (mix): "
              f"{p['lm_alarms']} warning/error rows on the clean pairs, culprit named {p['lm_named']}/{p['lm_bugs']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("dump")
    p.add_argument("--ms-python", required=True)
    p.add_argument("--pt-python", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ours", action="store_true", help="our collectors (PYTHONPATH=this checkout), EXTRA only")
    p.add_argument("only", nargs="*", help="cases whose names start so (default: all)")
    p = sub.add_parser("compare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ours", type=Path, help="our collectors' dumps of EXTRA (dump --ours)")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("worker")
    p.add_argument("framework", choices=("mindspore", "pytorch"))
    p.add_argument("case")
    p.add_argument("level")
    p.add_argument("out", type=Path)
    p.add_argument("--ours", action="store_true")
    args = parser.parse_args()
    if args.command == "worker":
        worker(args.framework, args.case, args.level, args.out, args.ours)
    elif args.command == "dump":
        dump(args.ms_python, args.pt_python, args.out, args.only, args.ours)
    else:
        figures = compare(args.out, args.ours)
        summary(figures)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
