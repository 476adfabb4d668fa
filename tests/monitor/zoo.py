"""The monitor's zoo: tiny models trained under TrainerMon, clean or with one planted fault, and what the first
anomaly must then be. The cases are framework-free (MODELS, FAULTS, `expected`); each framework's runner
(`RUNNERS`, at the end) trains them, so that tests/monitor/test_zoo.py runs every case with every framework.

Faults, each at step AT (the reference's report: layer 2's fc1 weights x50 at step 20):
    wscale   the fc1 weight multiplied by 50 before the step's forward
    nan      one element of fc1's output set to NaN
    lr       the learning rate x100 for one step
    batch    a corrupted batch: token ids all 0 (transformer, LSTM), images x30 (CNN)
    explode  the gradient flowing out of fc1's backward x1e4 (a gradient explosion)
    gdrop    fc1's weight gradient x0.1 from step AT on (the reference's miss: a drop)
"""

from __future__ import annotations

import json
import math
import os

from tests.monitor.helpers import monitoring

AT = 20
MODELS = ("gpt", "cnn", "lstm")
FAULTS = ("wscale", "nan", "lr", "batch", "explode", "gdrop")
FC1 = {"gpt": "layers.1.fc1", "cnn": "fc1", "lstm": "fc1"}
# the reference's documented alert settings (both rules of its docs), the metrics every test records
RULES = [{"rule_name": "AnomalyNan", "args": {"threshold": 1e10}},
         {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}]
CONFIG = {"targets": {}, "xy_distribution": True, "all_xy": True, "wg_distribution": True, "mv_distribution": True,
          "ur_distribution": True, "param_distribution": True, "format": "csv",
          "ops": ["min", "max", "mean", "norm", "zeros", "nans"], "alert": {"rules": RULES, "dump": False}}


def expected(model: str, fault: str) -> dict:
    """What the first anomaly must be (fields of the analysis's `first`)."""
    fc1 = FC1[model]
    return {
        "wscale": {"step": AT, "stage": "forward", "module": fc1, "kind": "spike"},
        "nan": {"step": AT, "stage": "forward", "module": fc1, "kind": "nan"},
        "lr": {"step": AT, "stage": "optimizer", "kind": "spike"},      # every parameter's update: any module
        "batch": {"step": AT, "stage": "forward", "module": ""},        # the model's input: the data
        "explode": {"step": AT, "stage": "backward", "module": fc1, "kind": "spike"},
        "gdrop": {"step": AT, "stage": "backward", "module": fc1, "kind": "drop"},
    }[fault]


def write_config(directory, **changes) -> str:
    config = dict(CONFIG, **changes)
    path = os.path.join(directory, "monitor_config.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return path


# ------------------------------------------------------------------------------------------------------ PyTorch
def _torch_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, d, heads=2, bug_from_length=None):
            super().__init__()
            self.qkv, self.proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
            self.bug_from_length = bug_from_length

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, -1))
            scale = 1.0 / math.sqrt(d // self.heads)
            if self.bug_from_length is not None and t >= self.bug_from_length:
                scale *= 4.0            # the "long sequence" kernel path scales the scores wrongly
            scores = (q @ k.transpose(-1, -2)) * scale
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            a = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
            return self.proj(a.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        def __init__(self, d, bug_from_length=None):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm(d), Attention(d, bug_from_length=bug_from_length)
            self.ln2, self.fc1, self.act, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab=32, d=16, layers=2, bug_from_length=None):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(32, d)
            self.layers = nn.ModuleList(Block(d, bug_from_length if i == 1 else None) for i in range(layers))
            self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

        def forward(self, x):
            h = self.emb(x) + self.pos(torch.arange(x.shape[1]))
            for layer in self.layers:
                h = layer(h)
            return self.head(self.lnf(h))

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1, self.r1 = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(inplace=True)
            self.c2, self.b2, self.r2 = nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True)
            self.pool, self.fc1 = nn.AdaptiveAvgPool2d(1), nn.Linear(8, 10)

        def forward(self, x):
            x = F.max_pool2d(self.r1(self.b1(self.c1(x))), 2)
            return self.fc1(self.pool(self.r2(self.b2(self.c2(x)))).flatten(1))

    class LSTMNet(nn.Module):
        def __init__(self, vocab=24, d=16):
            super().__init__()
            self.emb, self.lstm, self.fc1 = nn.Embedding(vocab, d), nn.LSTM(d, d, batch_first=True), nn.Linear(d, vocab)

        def forward(self, x):
            return self.fc1(self.lstm(self.emb(x))[0])

    return {"gpt": GPT, "cnn": CNN, "lstm": LSTMNet}


def batch(model: str, step: int, length: int = 8):
    """The step's batch: a fixed function of the step (every run of a case sees the same data)."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    if model == "cnn":
        x = torch.randn(8, 3, 8, 8, generator=g)
        return x, ((x.mean((1, 2, 3)) * 10).long().clamp(-4, 5) + 4)
    vocab = 32 if model == "gpt" else 24
    x = torch.randint(0, vocab, (4, length), generator=g)
    return x, (x * 3 + 1) % vocab


def train_pytorch(model: str, out: str, steps: int, fault: str = "none", config: str | None = None,
                  autocast: bool = False, long_from: int | None = None, bug: bool = False,
                  seed: int = 0) -> list:
    """Train `model` for `steps` steps under TrainerMon (config: its file; None: no monitor) with MONITOR_OUTPUT_DIR
    `out`; the losses. autocast: the forward in bfloat16 (CPU autocast). long_from: the batches from that step on
    are twice as long; bug: the attention of layer 1 takes a faulty path for them (the GPT's "long sequence"
    kernel)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    torch.set_num_threads(1)        # tiny models: more threads only spin
    net = _torch_models()[model](**({"bug_from_length": 16} if bug and model == "gpt" else {}))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    fc1 = net.get_submodule(FC1[model])
    current = [0]
    if fault == "nan":
        def nan_hook(module, inputs, output):
            if current[0] == AT:
                output = output.clone()
                output.view(-1)[3] = float("nan")
                return output
            return None
        fc1.register_forward_hook(nan_hook)
    elif fault == "gdrop":
        fc1.weight.register_hook(lambda grad: grad * 0.1 if current[0] >= AT else grad)
    elif fault == "explode":
        def explode(module, grad_input, grad_output):
            if current[0] == AT:
                return tuple(None if g is None else g * 1e4 for g in grad_input)
            return None
        fc1.register_full_backward_hook(explode)
    from msprobe.pytorch import TrainerMon

    with monitoring(TrainerMon, config, out, net, opt):
        losses = []
        for step in range(steps):
            current[0] = step
            if fault == "wscale" and step == AT:
                with torch.no_grad():
                    fc1.weight.mul_(50)
            x, y = batch(model, step, 16 if long_from is not None and step >= long_from else 8)
            if fault == "batch" and step == AT:
                x = x * 30 if x.is_floating_point() else torch.zeros_like(x)
            lr = opt.param_groups[0]["lr"]
            if fault == "lr" and step == AT:
                opt.param_groups[0]["lr"] = lr * 100
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = net(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            opt.param_groups[0]["lr"] = lr
            losses.append(loss.item())
    return losses


def train_mindspore(*args, **kwargs) -> list:
    """The MindSpore runner (tests/monitor/zoo_mindspore.py)."""
    from tests.monitor.zoo_mindspore import train

    return train(*args, **kwargs)


# framework -> its runner: train(model, out, steps, fault="none", config=None, autocast=False, long_from=None,
# bug=False, seed=0) -> the losses. The MindSpore runner (PyNative, msprobe.mindspore's TrainerMon) builds the same
# models with the same module names and plants the same faults at the same steps; tests/monitor/test_zoo.py runs
# every case with every runner listed here.
RUNNERS = {"pytorch": train_pytorch, "mindspore": train_mindspore}
