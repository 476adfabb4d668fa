#!/usr/bin/env python3
"""Generate a realistic synthetic msprobe dump pair (target + golden) for benchmarking `msprobe compare`.

The layout copies the real "mix" level dumps of tests/fixtures/stats_mix_step0 (a small GPT trained one
step): per transformer block the forward APIs (Functional.layer_norm / linear / gelu / softmax, Torch.matmul,
Tensor.__mul__ / __eq__ / masked_fill / __add__) with their Module.* wrappers, the backward of all of
them in reverse order with Module.*.parameters_grad.0 entries, then gradient clipping (Torch._foreach_norm
over every grad) and a non-foreach AdamW step (9 Tensor.* calls per parameter).  The model is scaled by
repeating blocks so that ``--entries N`` gives about N entries (about 3.5 result rows per entry, like the
real dump: 1350 rows / 400 entries).

golden == target except for a realistic perturbation:
  * forward: identical up to 30 % of the blocks, then a relative noise on the statistics that grows from
    1e-6 to 1e-3 towards the loss; one op (fc2 of the first diverging block) has a golden output norm of
    40 % of the target's (NormRelativeErr 150 %, an error row);
  * backward, parameters_grad, clipping and optimizer: relative noise 1e-4 .. 1e-3 (the loss differs);
  * every 8th block's fc1 is a CastLinear whose Functional.linear runs in bfloat16 on the target and in
    float32 on the golden (dtype rows, as in the real dump).
Masked attention scores carry -inf (Min/Mean -Infinity, Norm Infinity) like real dumps, unless --no-inf.

``--tensor``: task "tensor"; every tensor record has a ``data_name`` and a .npy file in
<side>/dump_tensor_data/ (float32; int64 token ids; bool masks); golden = target * (1 + noise).
The model size (number of blocks) is chosen so that both sides together hold about --tensor-gb GB:
a few tensors of tens of MB (embedding / lm_head weights, logits) and many small ones.
Clipping and optimizer are left out of tensor dumps by default (--optimizer to keep them).

Deterministic for a given seed.  Usage:
    python benchmarks/make_dumps.py OUT_DIR --entries 20000
    python benchmarks/make_dumps.py OUT_DIR --tensor --tensor-gb 1.5
OUT_DIR/{target,golden}/{dump.json,stack.json,construct.json[,dump_tensor_data/]} and OUT_DIR/meta.json
are written (into OUT_DIR.tmp first, renamed when complete).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import sys
import time

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency of msprobe
    orjson = None

NEG_INF = "__MSPROBE_BENCH_NEG_INF__"
POS_INF = "__MSPROBE_BENCH_POS_INF__"

# --------------------------------------------------------------------------------------------------
# stack.json text (grouped 26.x format); lines look like the real ones
MODULE_PY = "/usr/lib/python3/site-packages/torch/nn/modules/module.py"
MODEL_PY = "/data/train/gpt/model.py"
TRAIN_PY = "/data/train/gpt/pretrain.py"


def _frame(path, line, func, code):
    return f"File {path}, line {line}, in {func}, \n {code}"


CALL = [_frame(MODULE_PY, 1789, "_call_impl", "return forward_call(*args, **kwargs)"),
        _frame(MODULE_PY, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")]
HOOK = [_frame(MODULE_PY, 1811, "inner", "args_kwargs_result = hook(self, args, kwargs)  # type: ignore[misc]"),
        _frame(MODULE_PY, 1884, "_call_impl", "return inner()"),
        _frame(MODULE_PY, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")]
INNER = [_frame(MODULE_PY, 1832, "inner", "result = forward_call(*args, **kwargs)"),
         _frame(MODULE_PY, 1884, "_call_impl", "return inner()"),
         _frame(MODULE_PY, 1778, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")]
ROOT = [_frame(TRAIN_PY, 188, "train_step", "_, loss = model(idx, tgt)"),
        _frame(TRAIN_PY, 251, "main", "loss = train_step(model, optimizer, batch)"),
        _frame(TRAIN_PY, 270, "<module>", "main()")]
GPT = [_frame(MODEL_PY, 141, "forward", "x = block(x)")] + CALL + ROOT
BLOCK_ATTN = [_frame(MODEL_PY, 97, "forward", "x = x + self.attn(self.ln1(x))")] + CALL + GPT
BLOCK_MLP = [_frame(MODEL_PY, 98, "forward", "x = x + self.mlp(self.ln2(x))")] + CALL + GPT
ATTN = [_frame(MODEL_PY, 61, "forward", "att = (q @ k.transpose(-2, -1)) * self.scale")] + CALL + BLOCK_ATTN
MLP = [_frame(MODEL_PY, 80, "forward", "return self.fc2(self.act(self.fc1(x)))")] + CALL + BLOCK_MLP
OPT_PY = "/usr/lib/python3/site-packages/torch/optim/adamw.py"
CLIP_PY = "/usr/lib/python3/site-packages/torch/nn/utils/clip_grad.py"
STEP = [_frame(TRAIN_PY, 196, "train_step", "optimizer.step()")] + ROOT[1:]
CLIP = [_frame(TRAIN_PY, 194, "train_step", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")] + ROOT[1:]


def _api(path, line, func, code, ctx):
    return [_frame(path, line, func, code)] + INNER + ctx


STACKS = {
    "mod_emb": HOOK + [_frame(MODEL_PY, 136, "forward", "x = self.tok_emb(idx) + self.pos_emb(pos)")] + CALL + ROOT,
    "emb": _api("/usr/lib/python3/site-packages/torch/nn/modules/sparse.py", 189, "forward", "return F.embedding(",
                [_frame(MODEL_PY, 136, "forward", "x = self.tok_emb(idx) + self.pos_emb(pos)")] + CALL + ROOT),
    "add_emb": [_frame(MODEL_PY, 136, "forward", "x = self.tok_emb(idx) + self.pos_emb(pos)")] + CALL + ROOT,
    "mod_block": HOOK + GPT,
    "mod_ln1": HOOK + BLOCK_ATTN,
    "ln1": _api("/usr/lib/python3/site-packages/torch/nn/modules/normalization.py", 229, "forward",
                "return F.layer_norm(", HOOK[1:] + BLOCK_ATTN),
    "mod_attn": HOOK + BLOCK_ATTN,
    "mod_qkv": HOOK + [_frame(MODEL_PY, 57, "forward", "q, k, v = self.qkv(x).split(self.n_embd, dim=2)")] + CALL
    + BLOCK_ATTN,
    "qkv": _api("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward",
                "return F.linear(input, self.weight, self.bias)",
                [_frame(MODEL_PY, 57, "forward", "q, k, v = self.qkv(x).split(self.n_embd, dim=2)")] + CALL
                + BLOCK_ATTN),
    "scores": ATTN,
    "mask": [_frame(MODEL_PY, 62, "forward", "att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))")]
    + CALL + BLOCK_ATTN,
    "softmax": [_frame(MODEL_PY, 63, "forward", "att = F.softmax(att, dim=-1)")] + CALL + BLOCK_ATTN,
    "av": [_frame(MODEL_PY, 64, "forward", "y = att @ v")] + CALL + BLOCK_ATTN,
    "mod_proj": HOOK + [_frame(MODEL_PY, 66, "forward", "return self.proj(y)")] + CALL + BLOCK_ATTN,
    "proj": _api("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward",
                 "return F.linear(input, self.weight, self.bias)",
                 [_frame(MODEL_PY, 66, "forward", "return self.proj(y)")] + CALL + BLOCK_ATTN),
    "res1": BLOCK_ATTN,
    "mod_ln2": HOOK + BLOCK_MLP,
    "ln2": _api("/usr/lib/python3/site-packages/torch/nn/modules/normalization.py", 229, "forward",
                "return F.layer_norm(", HOOK[1:] + BLOCK_MLP),
    "mod_mlp": HOOK + MLP,
    "fc1": _api("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward",
                "return F.linear(input, self.weight, self.bias)", MLP),
    "fc1_cast": [_frame(MODEL_PY, 33, "forward", "return F.linear(x.to(self.dtype), self.weight.to(self.dtype), "
                                                 "self.bias.to(self.dtype)).float()")] + INNER + MLP,
    "gelu": _api("/usr/lib/python3/site-packages/torch/nn/modules/activation.py", 816, "forward",
                 "return F.gelu(input, approximate=self.approximate)", MLP),
    "fc2": _api("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward",
                "return F.linear(input, self.weight, self.bias)", MLP),
    "res2": BLOCK_MLP,
    "mod_head": HOOK + [_frame(MODEL_PY, 143, "forward", "logits = self.lm_head(self.ln_f(x))")] + CALL + ROOT,
    "ln_f": _api("/usr/lib/python3/site-packages/torch/nn/modules/normalization.py", 229, "forward",
                 "return F.layer_norm(", [_frame(MODEL_PY, 143, "forward", "logits = self.lm_head(self.ln_f(x))")]
                 + CALL + ROOT),
    "lm_head": _api("/usr/lib/python3/site-packages/torch/nn/modules/linear.py", 134, "forward",
                    "return F.linear(input, self.weight, self.bias)",
                    [_frame(MODEL_PY, 143, "forward", "logits = self.lm_head(self.ln_f(x))")] + CALL + ROOT),
    "loss": [_frame(MODEL_PY, 145, "forward", "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), "
                                              "targets.view(-1))")] + CALL + ROOT,
    "foreach_norm": [_frame(CLIP_PY, 97, "_get_total_norm", "norms.extend(torch._foreach_norm(device_tensors, "
                                                            "norm_type))")] + CLIP,
    "clip": [_frame(CLIP_PY, 155, "_clip_grads_with_norm_", "clip_coef = max_norm / (total_norm + 1e-6)")] + CLIP,
    "opt_step": [_frame(OPT_PY, 431, "_single_tensor_adamw", "step_t += 1")] + STEP,
    "opt_decay": [_frame(OPT_PY, 441, "_single_tensor_adamw", "param.mul_(1 - lr * weight_decay)")] + STEP,
    "opt_m": [_frame(OPT_PY, 458, "_single_tensor_adamw", "exp_avg.lerp_(grad, 1 - beta1)")] + STEP,
    "opt_v": [_frame(OPT_PY, 459, "_single_tensor_adamw", "exp_avg_sq.mul_(beta2).addcmul_(grad, grad, "
                                                          "value=1 - beta2)")] + STEP,
    "opt_denom": [_frame(OPT_PY, 510, "_single_tensor_adamw", "denom = (exp_avg_sq.sqrt() / "
                                                              "bias_correction2_sqrt).add_(eps)")] + STEP,
    "opt_update": [_frame(OPT_PY, 512, "_single_tensor_adamw", "param.addcdiv_(exp_avg, denom, "
                                                               "value=-step_size)")] + STEP,
}


# --------------------------------------------------------------------------------------------------
class Spec:
    """A tensor argument before it is realised: shape, dtype, requires_grad, value scale and kind."""

    __slots__ = ("shape", "dtype", "rg", "scale", "kind", "bf16", "numel")

    def __init__(self, shape, dtype="torch.float32", rg=True, scale=1.0, kind="normal", bf16=False):
        self.shape = list(shape)
        self.dtype = dtype
        self.rg = rg
        self.scale = scale
        self.kind = kind          # normal | pos | ids | mask | masked (causal -inf) | const
        self.bf16 = bf16          # bfloat16 on the target, float32 on the golden
        self.numel = math.prod(self.shape) if self.shape else 1

    def nbytes(self):
        return self.numel * (8 if self.kind == "ids" else 1 if self.kind == "mask" else 4)


class Scalar:
    __slots__ = ("rec",)

    def __init__(self, kind, value):
        self.rec = {"type": kind, "value": value}


def I(v):  # noqa: E743 - short helpers keep the model description readable
    return Scalar("int", v)


def F(v):
    return Scalar("float", v)


def B(v):
    return Scalar("bool", v)


def S(v):
    return Scalar("str", v)


# --------------------------------------------------------------------------------------------------
class Side:
    """Output of one side: streamed dump.json chunks, construct, tensor directory."""

    def __init__(self, directory, tensor):
        self.directory = directory
        self.tensor_dir = os.path.join(directory, "dump_tensor_data") if tensor else None
        self.chunks = []
        self.construct = {}
        self.bytes = 0
        self.files = 0


def _dumps(obj) -> bytes:
    if orjson is not None:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2)
    return json.dumps(obj, indent=1).encode()


def _fix_inf(raw: bytes) -> bytes:
    if b"__MSPROBE_BENCH_" not in raw:
        return raw
    return raw.replace(f'"{NEG_INF}"'.encode(), b"-Infinity").replace(f'"{POS_INF}"'.encode(), b"Infinity")


def _bf16(x: float) -> float:
    if x == 0.0 or not math.isfinite(x):
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * 256.0) / 256.0, e)


def _bf16_array(a: np.ndarray) -> np.ndarray:
    u = a.view(np.uint32)
    u += np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))
    u &= np.uint32(0xFFFF0000)
    return a


def _finite_or_token(x):
    if isinstance(x, float) and not math.isfinite(x):
        if x != x:
            return "NaN"
        return POS_INF if x > 0 else NEG_INF
    return x


class Builder:
    """Walks the model in call order and emits entries; in dry mode only counts entries and bytes."""

    def __init__(self, cfg, n_blocks, seed=0, tensor=False, optimizer=True, inf=True, out=None, dry=False):
        self.cfg = cfg
        self.n_blocks = n_blocks
        self.tensor = tensor
        self.optimizer = optimizer
        self.inf = inf
        self.dry = dry
        self.rnd = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.counters = {}
        self.entries = 0
        self.leaves = 0
        self.tensor_bytes = 0
        self.stack_groups = {}     # key -> [entry names]
        self.diverge = max(0, int(n_blocks * 0.3)) if n_blocks > 1 else 0
        self.sigma = 0.0
        self.out_scale = 1.0
        self.params = []           # (module prefix, param name, shape) in model.parameters() order
        if not dry:
            self.t = Side(os.path.join(out, "target"), tensor)
            self.g = Side(os.path.join(out, "golden"), tensor)
            for side in (self.t, self.g):
                os.makedirs(side.directory)
                if tensor:
                    os.makedirs(side.tensor_dir)
            if tensor:
                pool_size = 1 << 24
                self.pool = self.np_rng.standard_normal(pool_size, dtype=np.float32)
                self.noise_pool = self.np_rng.standard_normal(pool_size, dtype=np.float32)
                s = cfg["seq"]
                self.tril = np.tril(np.ones((s, s), dtype=bool))

    # ---- names -------------------------------------------------------------------------------------
    def num(self, api):
        n = self.counters.get(api, 0)
        self.counters[api] = n + 1
        return n

    # ---- emit --------------------------------------------------------------------------------------
    def emit(self, name, body, parent=None, stack=None, extra_construct=()):
        self.entries += 1
        if stack is not None:
            self.stack_groups.setdefault(stack, []).append(name)
        if self.dry:
            self._count(body)
            return
        t_body, g_body = self.realize_body(name, body)
        key = _dumps(name)
        self.t.chunks.append(key + b": " + _fix_inf(_dumps(t_body)))
        self.g.chunks.append(key + b": " + _fix_inf(_dumps(g_body)))
        for side in (self.t, self.g):
            for extra, extra_parent in extra_construct:
                side.construct[extra] = extra_parent
            side.construct[name] = parent

    def _count(self, value):
        if isinstance(value, Spec):
            self.leaves += 1
            self.tensor_bytes += value.nbytes()
        elif isinstance(value, dict):
            for v in value.values():
                self._count(v)
        elif isinstance(value, list):
            for v in value:
                self._count(v)
        else:
            self.leaves += 1

    def api(self, api, inputs, outputs, kwargs=None, parent=None, stack=None, number=None):
        n = self.num(api) if number is None else number
        name = f"{api}.{n}.forward"
        self.emit(name, {"input_args": inputs, "input_kwargs": kwargs or {}, "output": outputs}, parent, stack)
        return n

    def module(self, prefix, cls, inputs, outputs, params=None, parent=None, stack=None):
        name = f"{prefix}.{cls}.forward.0"
        self.emit(name, {"input_args": inputs, "input_kwargs": {}, "output": outputs, "parameters": params or {}},
                  parent, stack)
        return name

    def backward(self, name, inputs, outputs, parent=None):
        self.emit(name, {"input": inputs, "output": outputs}, parent)

    def params_grad(self, prefix, cls, grads, parent=None):
        self.emit(f"{prefix}.{cls}.parameters_grad.0", {k: [v] for k, v in grads.items()}, parent)

    # ---- realise -----------------------------------------------------------------------------------
    def realize_body(self, name, body):
        t_body, g_body = {}, {}
        direction = "parameters_grad" if ".parameters_grad." in name else ""
        for key, value in body.items():
            if direction:
                path = f"{name}.{key}"
                pairs = [self.realize(v, path, 1.0) for v in value]
                t_body[key] = [p[0] for p in pairs]
                g_body[key] = [p[1] for p in pairs]
                continue
            segment = "input" if key in ("input_args", "input_kwargs", "input") else key
            scale = self.out_scale if key == "output" else 1.0
            t_body[key], g_body[key] = self.realize(value, f"{name}.{segment}" if self.tensor else None, scale)
        return t_body, g_body

    def realize(self, value, path, out_scale):
        if isinstance(value, Spec):
            self.leaves += 1
            if self.tensor:
                return self.tensor_record(value, path, out_scale)
            return self.stats_record(value, out_scale)
        if value is None:
            self.leaves += 1
            return None, None
        if isinstance(value, Scalar):
            self.leaves += 1
            return value.rec, value.rec
        if isinstance(value, list):
            ts, gs = [], []
            for i, v in enumerate(value):
                t, g = self.realize(v, f"{path}.{i}" if path else None, out_scale)
                ts.append(t)
                gs.append(g)
            return ts, gs
        if isinstance(value, dict):
            ts, gs = {}, {}
            for k, v in value.items():
                ts[k], gs[k] = self.realize(v, f"{path}.{k}" if path else None, out_scale)
            return ts, gs
        raise TypeError(type(value))

    def stats_record(self, spec, out_scale):
        r = self.rnd.random
        kind = spec.kind
        if kind == "ids":
            rec = {"type": "torch.Tensor", "dtype": "torch.int64", "shape": spec.shape,
                   "Max": self.cfg["vocab"] - 1 - int(r() * 50), "Min": int(r() * 50), "Mean": None, "Norm": None,
                   "requires_grad": False}
            return rec, rec
        if kind == "mask":
            rec = {"type": "torch.Tensor", "dtype": "torch.bool", "shape": spec.shape, "Max": True, "Min": False,
                   "Mean": None, "Norm": None, "requires_grad": False}
            return rec, rec
        s = spec.scale
        if kind == "const":
            mx = mn = mean = s
            norm = abs(s) * math.sqrt(spec.numel)
        else:
            mx = s * (2.0 + r())
            mn = -s * (2.0 + r())
            mean = s * (r() - 0.5) * 0.02
            norm = s * math.sqrt(spec.numel) * (0.8 + 0.4 * r())
            if kind == "pos":
                mn = s * r() * 1e-3
                mean = s * (0.05 + 0.1 * r())
        if kind == "masked" and self.inf:
            t = {"type": "torch.Tensor", "dtype": spec.dtype, "shape": spec.shape, "Max": mx, "Min": NEG_INF,
                 "Mean": NEG_INF, "Norm": POS_INF, "requires_grad": spec.rg}
            g = dict(t)
            if self.sigma:
                g["Max"] = mx * (1.0 + self.sigma * self.rnd.gauss(0.0, 1.0))
            return t, g
        t = {"type": "torch.Tensor", "dtype": spec.dtype, "shape": spec.shape, "Max": mx, "Min": mn, "Mean": mean,
             "Norm": norm, "requires_grad": spec.rg}
        sigma = self.sigma
        if sigma == 0.0 and out_scale == 1.0 and not spec.bf16:
            return t, t
        gauss = self.rnd.gauss
        g = dict(t)
        if sigma:
            g["Max"] = mx * (1.0 + sigma * gauss(0.0, 1.0))
            g["Min"] = mn * (1.0 + sigma * gauss(0.0, 1.0))
            g["Mean"] = mean * (1.0 + 10.0 * sigma * gauss(0.0, 1.0))
            g["Norm"] = norm * (1.0 + sigma * gauss(0.0, 1.0))
        if out_scale != 1.0:
            for key in ("Max", "Min", "Mean", "Norm"):
                g[key] = g[key] * out_scale
        if spec.bf16:
            t["dtype"] = "torch.bfloat16"
            for key in ("Max", "Min", "Mean", "Norm"):
                t[key] = _bf16(t[key])
        return t, g

    # tensor mode -------------------------------------------------------------------------------------
    def _slice(self, pool, n):
        size = pool.size
        if n <= size:
            start = int(self.np_rng.integers(0, size - n + 1))
            return pool[start:start + n]
        reps = -(-n // size)
        return np.tile(pool, reps)[:n]

    def make_array(self, spec):
        shape = tuple(spec.shape)
        kind = spec.kind
        if kind == "ids":
            return self.np_rng.integers(0, self.cfg["vocab"], size=shape, dtype=np.int64)
        if kind == "mask":
            return np.ascontiguousarray(self.tril[:shape[-2], :shape[-1]].reshape(shape))
        if kind == "const":
            return np.full(shape, spec.scale, dtype=np.float32)
        a = self._slice(self.pool, spec.numel) * np.float32(spec.scale)
        if kind == "pos":
            np.abs(a, out=a)
        a = a.reshape(shape)
        if kind == "masked" and self.inf:
            a[..., ~self.tril[:shape[-2], :shape[-1]]] = -np.inf
        return a

    def perturb(self, a, out_scale):
        if a.dtype.kind != "f" or (self.sigma == 0.0 and out_scale == 1.0):
            return a
        noise = self._slice(self.noise_pool, a.size).reshape(a.shape) * np.float32(self.sigma)
        noise += np.float32(out_scale)
        with np.errstate(invalid="ignore"):
            noise *= a
        return noise

    def tensor_record(self, spec, path, out_scale):
        data_name = f"{path}.npy"
        a = self.make_array(spec)
        g = self.perturb(a, out_scale)
        t = _bf16_array(a.copy()) if spec.bf16 else a
        t_rec = self._array_record(spec, t, data_name, "torch.bfloat16" if spec.bf16 else spec.dtype)
        g_rec = self._array_record(spec, g, data_name, spec.dtype)
        for side, arr in ((self.t, t), (self.g, g)):
            np.save(os.path.join(side.tensor_dir, data_name), arr)
            side.bytes += arr.nbytes
            side.files += 1
        self.tensor_bytes += t.nbytes + g.nbytes
        return t_rec, g_rec

    @staticmethod
    def _array_record(spec, a, data_name, dtype):
        if a.dtype == np.bool_:
            mx, mn, mean, norm = bool(a.max()), bool(a.min()), None, None
        elif a.dtype.kind in "iu":
            mx, mn, mean, norm = int(a.max()), int(a.min()), None, None
        else:
            with np.errstate(all="ignore"):
                mx, mn = float(a.max()), float(a.min())
                mean = float(a.mean(dtype=np.float64))
                flat = a.reshape(-1)
                norm = float(math.sqrt(float(np.dot(flat, flat)))) if np.isfinite(mn) else math.inf
            mx, mn, mean, norm = (_finite_or_token(x) for x in (mx, mn, mean, norm))
        return {"type": "torch.Tensor", "dtype": dtype, "shape": spec.shape, "Max": mx, "Min": mn, "Mean": mean,
                "Norm": norm, "requires_grad": spec.rg, "data_name": data_name}

    # ---- the model ---------------------------------------------------------------------------------
    def set_forward_sigma(self, block):
        if block is None or block < self.diverge:
            self.sigma = 0.0
        else:
            span = max(1, self.n_blocks - self.diverge)
            self.sigma = 1e-6 * 1000.0 ** (min(block - self.diverge, span) / span)

    def run(self):
        c = self.cfg
        b, s, h, nh, v, f = c["batch"], c["seq"], c["hidden"], c["heads"], c["vocab"], 4 * c["hidden"]
        act = [b, s, h]
        self.blocks_info = []
        # ---------------- forward: embeddings
        self.set_forward_sigma(None)
        n0 = self.api("Functional.embedding", [Spec([b, s], kind="ids", rg=False), Spec([v, h], scale=1.0), None, None,
                                               F(2.0), B(False), B(False)], [Spec(act)],
                      parent="Module.tok_emb.Embedding.forward.0", stack="emb")
        self.module("Module.tok_emb", "Embedding", [Spec([b, s], kind="ids", rg=False)], [Spec(act)],
                    {"weight": Spec([v, h])}, stack="mod_emb")
        n1 = self.api("Functional.embedding", [Spec([s], kind="ids", rg=False), Spec([s, h]), None, None, F(2.0),
                                               B(False), B(False)], [Spec([s, h])],
                      parent="Module.pos_emb.Embedding.forward.0", stack="emb")
        self.module("Module.pos_emb", "Embedding", [Spec([s], kind="ids", rg=False)], [Spec([s, h])],
                    {"weight": Spec([s, h])}, stack="mod_emb")
        if not self.dry:
            for side in (self.t, self.g):
                side.construct = {"Torch.arange.0.forward": None, **side.construct}
        add0 = self.api("Tensor.__add__", [Spec(act), Spec([s, h])], [Spec(act)], stack="add_emb")
        self.params += [("Module.tok_emb", "weight", [v, h]), ("Module.pos_emb", "weight", [s, h])]
        # ---------------- forward: blocks
        for i in range(self.n_blocks):
            self.set_forward_sigma(i)
            self.blocks_info.append(self.block_forward(i, act, nh, f))
        # ---------------- forward: head and loss
        self.set_forward_sigma(self.n_blocks)
        ln_f = self.api("Functional.layer_norm", [Spec(act), [I(h)], Spec([h], kind="const"), Spec([h], kind="const",
                                                                                                  scale=0.0),
                                                  F(1e-5)], [Spec(act)], parent="Module.ln_f.LayerNorm.forward.0",
                        stack="ln_f")
        self.module("Module.ln_f", "LayerNorm", [Spec(act)], [Spec(act)],
                    {"weight": Spec([h], kind="const"), "bias": Spec([h], kind="const", scale=0.0)}, stack="mod_head")
        head = self.api("Functional.linear", [Spec(act), Spec([v, h], scale=0.02), None], [Spec([b, s, v])],
                        parent="Module.lm_head.Linear.forward.0", stack="lm_head")
        self.module("Module.lm_head", "Linear", [Spec(act)], [Spec([b, s, v])], {"weight": Spec([v, h], scale=0.02)},
                    stack="mod_head")
        ce = self.api("Functional.cross_entropy", [Spec([b * s, v]), Spec([b * s], kind="ids", rg=False)],
                      [Spec([], kind="pos")], stack="loss")
        for i in range(self.n_blocks):
            pre = f"Module.blocks.{i}"
            self.params += [(f"{pre}.ln1", "weight", [h]), (f"{pre}.ln1", "bias", [h]),
                            (f"{pre}.attn.qkv", "weight", [3 * h, h]), (f"{pre}.attn.qkv", "bias", [3 * h]),
                            (f"{pre}.attn.proj", "weight", [h, h]), (f"{pre}.attn.proj", "bias", [h]),
                            (f"{pre}.ln2", "weight", [h]), (f"{pre}.ln2", "bias", [h]),
                            (f"{pre}.mlp.fc1", "weight", [f, h]), (f"{pre}.mlp.fc1", "bias", [f]),
                            (f"{pre}.mlp.fc2", "weight", [h, f]), (f"{pre}.mlp.fc2", "bias", [h])]
        self.params += [("Module.ln_f", "weight", [h]), ("Module.ln_f", "bias", [h]), ("Module.lm_head", "weight", [v, h])]
        # ---------------- backward
        self.sigma = 1e-3
        g = dict(rg=False, scale=1e-3)
        self.backward(f"Functional.cross_entropy.{ce}.backward", [Spec([], kind="pos", rg=False)],
                      [Spec([b * s, v], **g)])
        self.backward(f"Functional.linear.{head}.backward", [Spec([b, s, v], **g)], [Spec([b * s, v], **g)],
                      parent="Module.lm_head.Linear.backward.0")
        self.params_grad("Module.lm_head", "Linear", {"weight": Spec([v, h], **g)})
        self.backward("Module.lm_head.Linear.backward.0", [Spec([b, s, v], **g)], [Spec(act, **g)])
        self.backward(f"Functional.layer_norm.{ln_f}.backward", [Spec(act, **g)],
                      [Spec(act, **g), Spec([h], **g), Spec([h], **g)], parent="Module.ln_f.LayerNorm.backward.0")
        self.params_grad("Module.ln_f", "LayerNorm", {"weight": Spec([h], **g), "bias": Spec([h], **g)})
        self.backward("Module.ln_f.LayerNorm.backward.0", [Spec(act, **g)], [Spec(act, **g)])
        for i in reversed(range(self.n_blocks)):
            self.sigma = 1e-3 * (0.3 + 0.7 * (i + 1) / self.n_blocks)
            self.block_backward(i, self.blocks_info[i], act, nh, f, g)
        self.backward(f"Tensor.__add__.{add0}.backward", [Spec(act, **g)], [Spec(act, **g), Spec([s, h], **g)])
        self.backward("Module.pos_emb.Embedding.backward.0", [Spec([s, h], **g)], [])
        self.backward(f"Functional.embedding.{n1}.backward", [Spec([s, h], **g)], [Spec([s, h], **g)])
        self.params_grad("Module.pos_emb", "Embedding", {"weight": Spec([s, h], **g)})
        self.backward("Module.tok_emb.Embedding.backward.0", [Spec(act, **g)], [])
        self.backward(f"Functional.embedding.{n0}.backward", [Spec(act, **g)], [Spec([v, h], **g)])
        self.params_grad("Module.tok_emb", "Embedding", {"weight": Spec([v, h], **g)})
        if self.optimizer:
            self.clip_and_step()
        return self

    def block_forward(self, i, act, nh, f):
        b, s, h = act
        pre = f"Module.blocks.{i}"
        blk = f"{pre}.Block.forward.0"
        attn = f"{pre}.attn.CausalSelfAttention.forward.0"
        mlp = f"{pre}.mlp.MLP.forward.0"
        cast = i % 8 == 0
        fc1_cls = "CastLinear" if cast else "Linear"
        info = {"cast": cast}
        ln_args = lambda: [Spec(act), [I(h)], Spec([h], kind="const"), Spec([h], kind="const", scale=0.0), F(1e-5)]  # noqa: E731
        ln_params = lambda: {"weight": Spec([h], kind="const"), "bias": Spec([h], kind="const", scale=0.0)}  # noqa: E731
        heads = [b, nh, s, s]
        hd = [b, nh, s, h // nh]
        info["ln1"] = self.api("Functional.layer_norm", ln_args(), [Spec(act)], parent=f"{pre}.ln1.LayerNorm.forward.0",
                               stack="ln1")
        self.module(f"{pre}.ln1", "LayerNorm", [Spec(act)], [Spec(act)], ln_params(), parent=blk, stack="mod_ln1")
        info["qkv"] = self.api("Functional.linear", [Spec(act), Spec([3 * h, h], scale=0.05), Spec([3 * h], scale=0.02)],
                               [Spec([b, s, 3 * h])], parent=f"{pre}.attn.qkv.Linear.forward.0", stack="qkv")
        self.module(f"{pre}.attn.qkv", "Linear", [Spec(act)], [Spec([b, s, 3 * h])],
                    {"weight": Spec([3 * h, h], scale=0.05), "bias": Spec([3 * h], scale=0.02)}, parent=attn,
                    stack="mod_qkv")
        split = self.num("Tensor.split")
        tr = [self.num("Tensor.transpose") for _ in range(5)]
        extra = [(f"Tensor.split.{split}.forward", attn)] + [(f"Tensor.transpose.{n}.forward", attn) for n in tr[:4]]
        info["mm0"] = self.api("Torch.matmul", [Spec(hd), Spec([b, nh, h // nh, s])], [Spec(heads)], parent=attn,
                               stack="scores")
        info["mul"] = self.api("Tensor.__mul__", [Spec(heads), F(1.0 / math.sqrt(h // nh))], [Spec(heads)],
                               parent=attn, stack="scores")
        self.api("Tensor.__eq__", [Spec([1, 1, s, s], rg=False, scale=1.0, kind="pos"), I(0)],
                 [Spec([1, 1, s, s], kind="mask", rg=False)], parent=attn, stack="mask")
        info["mf"] = self.api("Tensor.masked_fill", [Spec(heads), Spec([1, 1, s, s], kind="mask", rg=False),
                                                     F(NEG_INF if self.inf else -1e9)],
                              [Spec(heads, kind="masked")], parent=attn, stack="mask")
        info["sm"] = self.api("Functional.softmax", [Spec(heads, kind="masked")], [Spec(heads, kind="pos", scale=0.3)],
                              {"dim": I(-1)}, parent=attn, stack="softmax")
        info["mm1"] = self.api("Torch.matmul", [Spec(heads, kind="pos", scale=0.3), Spec(hd)], [Spec(hd)], parent=attn,
                               stack="av")
        info["proj"] = self.api("Functional.linear", [Spec(act), Spec([h, h], scale=0.05), Spec([h], scale=0.02)],
                                [Spec(act)], parent=f"{pre}.attn.proj.Linear.forward.0", stack="proj")
        self.module(f"{pre}.attn.proj", "Linear", [Spec(act)], [Spec(act)],
                    {"weight": Spec([h, h], scale=0.05), "bias": Spec([h], scale=0.02)}, parent=attn, stack="mod_proj")
        self.emit(attn, {"input_args": [Spec(act)], "input_kwargs": {}, "output": [Spec(act)], "parameters": {}},
                  blk, "mod_attn", extra_construct=extra + [(f"Tensor.transpose.{tr[4]}.forward", attn)])
        info["add1"] = self.api("Tensor.__add__", [Spec(act), Spec(act)], [Spec(act)], parent=blk, stack="res1")
        info["ln2"] = self.api("Functional.layer_norm", ln_args(), [Spec(act)], parent=f"{pre}.ln2.LayerNorm.forward.0",
                               stack="ln2")
        self.module(f"{pre}.ln2", "LayerNorm", [Spec(act)], [Spec(act)], ln_params(), parent=blk, stack="mod_ln2")
        fc1_mod = f"{pre}.mlp.fc1.{fc1_cls}.forward.0"
        tos = []
        if cast:
            tos = [(f"Tensor.to.{self.num('Tensor.to')}.forward", fc1_mod) for _ in range(4)]
        info["fc1"] = self.api("Functional.linear", [Spec(act, bf16=cast), Spec([f, h], scale=0.05, bf16=cast),
                                                     Spec([f], scale=0.02, bf16=cast)], [Spec([b, s, f], bf16=cast)],
                               parent=fc1_mod, stack="fc1_cast" if cast else "fc1")
        self.module(f"{pre}.mlp.fc1", fc1_cls, [Spec(act)], [Spec([b, s, f])],
                    {"weight": Spec([f, h], scale=0.05), "bias": Spec([f], scale=0.02)}, parent=mlp, stack="mod_mlp")
        info["gelu"] = self.api("Functional.gelu", [Spec([b, s, f])], [Spec([b, s, f])], {"approximate": S("none")},
                                parent=f"{pre}.mlp.act.GELU.forward.0", stack="gelu")
        self.module(f"{pre}.mlp.act", "GELU", [Spec([b, s, f])], [Spec([b, s, f])], parent=mlp, stack="mod_mlp")
        if i == self.diverge and self.n_blocks > 1:
            self.out_scale = 0.4  # where the runs really part: golden output norm 40 % of the target
        info["fc2"] = self.api("Functional.linear", [Spec([b, s, f]), Spec([h, f], scale=0.05), Spec([h], scale=0.02)],
                               [Spec(act)], parent=f"{pre}.mlp.fc2.Linear.forward.0", stack="fc2")
        self.out_scale = 1.0
        self.module(f"{pre}.mlp.fc2", "Linear", [Spec([b, s, f])], [Spec(act)],
                    {"weight": Spec([h, f], scale=0.05), "bias": Spec([h], scale=0.02)}, parent=mlp, stack="mod_mlp")
        self.emit(mlp, {"input_args": [Spec(act)], "input_kwargs": {}, "output": [Spec(act)], "parameters": {}},
                  blk, "mod_ln2", extra_construct=tos)
        info["add2"] = self.api("Tensor.__add__", [Spec(act), Spec(act)], [Spec(act)], parent=blk, stack="res2")
        self.module(pre, "Block", [Spec(act)], [Spec(act)], parent=None, stack="mod_block")
        info["split"], info["tr"], info["tos"] = split, tr, tos
        return info

    def block_backward(self, i, info, act, nh, f, g):
        b, s, h = act
        pre = f"Module.blocks.{i}"
        blk = f"{pre}.Block.backward.0"
        attn = f"{pre}.attn.CausalSelfAttention.backward.0"
        mlp = f"{pre}.mlp.MLP.backward.0"
        cast = info["cast"]
        fc1_cls = "CastLinear" if cast else "Linear"
        heads = [b, nh, s, s]
        hd = [b, nh, s, h // nh]
        gb = dict(g, bf16=cast)
        self.backward(f"Tensor.__add__.{info['add2']}.backward", [Spec(act, **g)], [Spec(act, **g), Spec(act, **g)],
                      parent=blk)
        self.backward(f"Functional.linear.{info['fc2']}.backward", [Spec(act, **g)], [Spec([b * s, f], **g)],
                      parent=f"{pre}.mlp.fc2.Linear.backward.0")
        self.params_grad(f"{pre}.mlp.fc2", "Linear", {"bias": Spec([h], **g), "weight": Spec([h, f], **g)})
        self.backward(f"{pre}.mlp.fc2.Linear.backward.0", [Spec(act, **g)], [Spec([b, s, f], **g)], parent=mlp)
        self.backward(f"Functional.gelu.{info['gelu']}.backward", [Spec([b, s, f], **g)], [Spec([b, s, f], **g)],
                      parent=f"{pre}.mlp.act.GELU.backward.0")
        self.backward(f"{pre}.mlp.act.GELU.backward.0", [Spec([b, s, f], **g)], [Spec([b, s, f], **g)], parent=mlp)
        self.backward(f"Functional.linear.{info['fc1']}.backward", [Spec([b, s, f], **gb)], [Spec([b * s, h], **gb)],
                      parent=f"{pre}.mlp.fc1.{fc1_cls}.backward.0")
        self.params_grad(f"{pre}.mlp.fc1", fc1_cls, {"bias": Spec([f], **g), "weight": Spec([f, h], **g)})
        self.backward(f"{pre}.mlp.fc1.{fc1_cls}.backward.0", [Spec([b, s, f], **g)], [Spec(act, **g)], parent=mlp)
        self.backward(mlp, [Spec(act, **g)], [Spec(act, **g)], parent=blk)
        self.backward(f"Functional.layer_norm.{info['ln2']}.backward", [Spec(act, **g)],
                      [Spec(act, **g), Spec([h], **g), Spec([h], **g)], parent=f"{pre}.ln2.LayerNorm.backward.0")
        self.params_grad(f"{pre}.ln2", "LayerNorm", {"weight": Spec([h], **g), "bias": Spec([h], **g)})
        self.backward(f"{pre}.ln2.LayerNorm.backward.0", [Spec(act, **g)], [Spec(act, **g)], parent=blk)
        self.backward(f"Tensor.__add__.{info['add1']}.backward", [Spec(act, **g)], [Spec(act, **g), Spec(act, **g)],
                      parent=blk)
        self.backward(f"Functional.linear.{info['proj']}.backward", [Spec(act, **g)], [Spec([b * s, h], **g)],
                      parent=f"{pre}.attn.proj.Linear.backward.0")
        self.params_grad(f"{pre}.attn.proj", "Linear", {"bias": Spec([h], **g), "weight": Spec([h, h], **g)})
        self.backward(f"{pre}.attn.proj.Linear.backward.0", [Spec(act, **g)], [Spec(act, **g)], parent=attn)
        self.backward(f"Torch.matmul.{info['mm1']}.backward", [Spec(hd, **g)], [Spec(heads, **g)], parent=attn)
        self.backward(f"Functional.softmax.{info['sm']}.backward", [Spec(heads, **g)], [Spec(heads, **g)], parent=attn)
        self.backward(f"Tensor.masked_fill.{info['mf']}.backward", [Spec(heads, **g)], [Spec(heads, **g)], parent=attn)
        self.backward(f"Tensor.__mul__.{info['mul']}.backward", [Spec(heads, **g)], [Spec(heads, **g), None],
                      parent=attn)
        self.backward(f"Torch.matmul.{info['mm0']}.backward", [Spec(heads, **g)], [Spec(hd, **g)], parent=attn)
        self.backward(f"Functional.linear.{info['qkv']}.backward", [Spec([b, s, 3 * h], **g)],
                      [Spec([b * s, h], **g)], parent=f"{pre}.attn.qkv.Linear.backward.0")
        self.params_grad(f"{pre}.attn.qkv", "Linear", {"bias": Spec([3 * h], **g), "weight": Spec([3 * h, h], **g)})
        self.backward(f"{pre}.attn.qkv.Linear.backward.0", [Spec([b, s, 3 * h], **g)], [Spec(act, **g)], parent=attn)
        self.backward(attn, [Spec(act, **g)], [Spec(act, **g)], parent=blk)
        self.backward(f"Functional.layer_norm.{info['ln1']}.backward", [Spec(act, **g)],
                      [Spec(act, **g), Spec([h], **g), Spec([h], **g)], parent=f"{pre}.ln1.LayerNorm.backward.0")
        self.params_grad(f"{pre}.ln1", "LayerNorm", {"weight": Spec([h], **g), "bias": Spec([h], **g)})
        self.backward(f"{pre}.ln1.LayerNorm.backward.0", [Spec(act, **g)], [Spec(act, **g)], parent=blk)
        self.backward(blk, [Spec(act, **g)], [Spec(act, **g)])

    def clip_and_step(self):
        self.sigma = 2e-4
        grads = [Spec(shape, rg=False, scale=1e-3) for _, _, shape in self.params]
        n = len(grads)
        self.emit(f"Torch._foreach_norm.{self.num('Torch._foreach_norm')}.forward",
                  {"input_args": [grads, F(2.0)], "input_kwargs": {},
                   "output": [Spec([], rg=False, kind="pos", scale=0.1) for _ in range(n)]}, "clip_grad", "foreach_norm")
        scalar = lambda: Spec([], rg=False, kind="pos", scale=0.5)  # noqa: E731
        self.api("Torch.vector_norm", [Spec([n], rg=False, kind="pos"), F(2.0)], [scalar()], parent="clip_grad",
                 stack="clip")
        self.api("Tensor.__add__", [scalar(), F(1e-6)], [scalar()], parent="clip_grad", stack="clip")
        self.api("Tensor.reciprocal", [scalar()], [scalar()], parent="clip_grad", stack="clip")
        self.api("Tensor.__mul__", [scalar(), F(1.0)], [scalar()], parent="clip_grad", stack="clip")
        for _prefix, _param, shape in self.params:
            p = functools.partial(Spec, shape)
            self.api("Tensor.__iadd__", [Spec([], rg=False, kind="const", scale=1.0), I(1)],
                     [Spec([], rg=False, kind="const", scale=2.0)], parent="optimizer", stack="opt_step")
            self.api("Tensor.mul_", [p(scale=0.05), F(0.9999)], [p(scale=0.05)], parent="optimizer", stack="opt_decay")
            self.api("Tensor.lerp_", [p(rg=False, scale=1e-4), p(rg=False, scale=1e-3), F(0.09999999999999998)],
                     [p(rg=False, scale=1e-4)], parent="optimizer", stack="opt_m")
            self.api("Tensor.mul_", [p(rg=False, kind="pos", scale=1e-7), F(0.999)],
                     [p(rg=False, kind="pos", scale=1e-7)], parent="optimizer", stack="opt_v")
            self.api("Tensor.addcmul_", [p(rg=False, kind="pos", scale=1e-7), p(rg=False, scale=1e-3),
                                         p(rg=False, scale=1e-3)], [p(rg=False, kind="pos", scale=1e-7)],
                     {"value": F(0.0010000000000000009)}, parent="optimizer", stack="opt_v")
            self.api("Tensor.sqrt", [p(rg=False, kind="pos", scale=1e-7)], [p(rg=False, kind="pos", scale=3e-4)],
                     parent="optimizer", stack="opt_denom")
            self.api("Tensor.__truediv__", [p(rg=False, kind="pos", scale=3e-4), F(0.031622776601683805)],
                     [p(rg=False, kind="pos", scale=1e-2)], parent="optimizer", stack="opt_denom")
            self.api("Tensor.add_", [p(rg=False, kind="pos", scale=1e-2), F(1e-08)],
                     [p(rg=False, kind="pos", scale=1e-2)], parent="optimizer", stack="opt_denom")
            self.api("Tensor.addcdiv_", [p(scale=0.05), p(rg=False, scale=1e-4), p(rg=False, kind="pos", scale=1e-2)],
                     [p(scale=0.05)], {"value": F(-0.10000000000000002)}, parent="optimizer", stack="opt_update")

    # ---- write -------------------------------------------------------------------------------------
    def finish(self, task):
        for side in (self.t, self.g):
            header = {"task": task, "level": "mix", "framework": "pytorch",
                      "dump_data_dir": side.tensor_dir if self.tensor else None}
            head = _dumps(header)[:-2]  # drop "\n}"
            with open(os.path.join(side.directory, "dump.json"), "wb") as out:
                out.write(head + b',\n  "data": {\n')
                out.write(b",\n".join(side.chunks))
                out.write(b"\n  }\n}\n")
            side.chunks = []
            construct = {"clip_grad": None, "optimizer": None} if self.optimizer else {}
            construct.update(side.construct)
            with open(os.path.join(side.directory, "construct.json"), "wb") as out:
                out.write(_dumps(construct))
            groups = {str(k): [names, STACKS[key]] for k, (key, names) in enumerate(self.stack_groups.items())}
            with open(os.path.join(side.directory, "stack.json"), "wb") as out:
                out.write(_dumps(groups))
        # the golden construct differs slightly in the real dumps too (Tensor.to backward parents)


def default_config(tensor):
    if tensor:  # small activations, vocabulary-sized weights/logits of tens of MB
        return {"batch": 2, "seq": 128, "hidden": 256, "heads": 4, "vocab": 16384}
    return {"batch": 4, "seq": 4096, "hidden": 4096, "heads": 32, "vocab": 151936}


def blocks_for_entries(cfg, entries, optimizer):
    e1 = Builder(cfg, 1, optimizer=optimizer, dry=True).run().entries
    e2 = Builder(cfg, 2, optimizer=optimizer, dry=True).run().entries
    per_block = e2 - e1
    return max(1, round((entries - (e1 - per_block)) / per_block))


def blocks_for_bytes(cfg, total_bytes, optimizer):
    b1 = Builder(cfg, 1, tensor=True, optimizer=optimizer, dry=True).run().tensor_bytes * 2
    b2 = Builder(cfg, 2, tensor=True, optimizer=optimizer, dry=True).run().tensor_bytes * 2
    per_block = b2 - b1
    return max(1, round((total_bytes - (b1 - per_block)) / per_block))


def generate(out_dir, entries=None, tensor=False, tensor_gb=1.5, seed=0, inf=True, optimizer=None, blocks=None,
             quiet=False):
    """Generate one dataset into out_dir (replaced if it exists); return its meta dict."""
    started = time.perf_counter()
    cfg = default_config(tensor)
    if optimizer is None:
        optimizer = not tensor
    if blocks is None:
        if tensor:
            blocks = blocks_for_bytes(cfg, tensor_gb * 1e9, optimizer)
        else:
            blocks = blocks_for_entries(cfg, entries or 20000, optimizer)
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    builder = Builder(cfg, blocks, seed=seed, tensor=tensor, optimizer=optimizer, inf=inf, out=tmp).run()
    builder.finish("tensor" if tensor else "statistics")
    meta = {"entries": builder.entries, "leaves": builder.leaves, "blocks": blocks, "config": cfg, "seed": seed,
            "tensor": tensor, "inf": inf, "optimizer": optimizer,
            "tensor_bytes_both_sides": builder.tensor_bytes if tensor else 0,
            "tensor_files_per_side": builder.t.files if tensor else 0,
            "dump_json_bytes": os.path.getsize(os.path.join(tmp, "target", "dump.json")),
            "generate_seconds": round(time.perf_counter() - started, 2)}
    with open(os.path.join(tmp, "meta.json"), "w") as out:
        json.dump(meta, out, indent=1)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    if not quiet:
        print(f"{out_dir}: {meta['entries']} entries, {meta['leaves']} leaves (result rows), {blocks} blocks, "
              f"dump.json {meta['dump_json_bytes'] / 1e6:.1f} MB"
              + (f", tensors {meta['tensor_bytes_both_sides'] / 1e9:.2f} GB in {meta['tensor_files_per_side']} "
                 f"files per side" if tensor else "")
              + f" ({meta['generate_seconds']} s)")
    return meta


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="dataset directory (target/ and golden/ are created inside)")
    parser.add_argument("--entries", type=int, default=20000, help="about this many entries per dump (statistics)")
    parser.add_argument("--tensor", action="store_true", help="real-tensor dump (task tensor, .npy files)")
    parser.add_argument("--tensor-gb", type=float, default=1.5, help="tensor data of both sides together, in GB")
    parser.add_argument("--blocks", type=int, help="number of transformer blocks (overrides --entries/--tensor-gb)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-inf", action="store_true", help="no -inf in masked attention (plain JSON numbers)")
    opt = parser.add_mutually_exclusive_group()
    opt.add_argument("--optimizer", dest="optimizer", action="store_true", default=None,
                     help="include grad clipping and the AdamW step (default for statistics dumps)")
    opt.add_argument("--no-optimizer", dest="optimizer", action="store_false",
                     help="leave out clipping and optimizer (default for tensor dumps)")
    args = parser.parse_args(argv)
    generate(args.out_dir, entries=args.entries, tensor=args.tensor, tensor_gb=args.tensor_gb, seed=args.seed,
             inf=not args.no_inf, optimizer=args.optimizer, blocks=args.blocks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
