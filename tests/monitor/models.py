"""A zoo of small models for the monitor's tests: each case builds a model, an optimizer and a batch maker whose
training exercises one thing hooks tend to break (in-place ops, checkpointing, autocast, recurrences, masks, a module
called twice, tuple and dict outputs, a loss the model returns)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812
from torch.utils.checkpoint import checkpoint


class Attention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c)), att


class Block(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x, mask):
        y, _ = self.attn(self.ln1(x), mask)
        x = x + y
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Token embedding, two blocks with causal masks, a head; returns {"loss", "logits"} (a dict output)."""

    def __init__(self, vocab: int = 32, d: int = 16, layers: int = 2, ckpt: str | None = None):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.ckpt = ckpt

    def forward(self, idx, targets):
        t = idx.shape[1]
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        x = self.emb(idx)
        for block in self.blocks:
            if self.ckpt:
                x = checkpoint(block, x, mask, use_reentrant=self.ckpt == "reentrant")
            else:
                x = block(x, mask)
        logits = self.head(self.norm(x))
        return {"loss": F.cross_entropy(logits.flatten(0, 1), targets.flatten()), "logits": logits}


class ConvNet(nn.Module):
    """Conv -> BatchNorm -> ReLU(inplace) twice, a residual add in place, pooling, a head; returns logits."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.relu2 = nn.ReLU(inplace=True)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(x))
        y += x
        return self.head(self.relu2(y).mean((2, 3)))


class Recurrent(nn.Module):
    """An LSTM (tuple output with a nested tuple), a GRU cell called in a loop (a module called many times)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 8, batch_first=True, num_layers=2)
        self.cell = nn.GRUCell(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, (h, _) = self.lstm(x)
        state = h[-1]
        for step in range(out.shape[1]):
            state = self.cell(out[:, step], state)
        return self.head(state)


class Twice(nn.Module):
    """One module applied twice per forward (weight sharing), a tuple of (tensor, dict) out of a submodule, a frozen
    layer and a scalar loss returned by the model."""

    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

        def forward(self, x, scale=None):
            return self.a(x), {"y": self.b(x), "n": 3}

    def __init__(self):
        super().__init__()
        self.pair = self.Pair()
        self.shared = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        a, d = self.pair(x, scale=2.0)
        h = self.shared(a) + self.shared(d["y"])
        return self.frozen(torch.tanh(h)).pow(2).mean()


def case(name: str, seed: int = 0):
    """(model, optimizer, make_batch(step) -> inputs tuple, loss_of(model output, inputs) -> loss, autocast)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    autocast = False
    if name.startswith("transformer"):
        ckpt = {"transformer_ckpt": "reentrant", "transformer_ckpt_nr": "non_reentrant"}.get(name)
        model = TinyTransformer(ckpt=ckpt)
        autocast = name == "transformer_autocast"

        def batch(_):
            return (torch.randint(0, 32, (2, 6), generator=gen), torch.randint(0, 32, (2, 6), generator=gen))

        def loss_of(out, _):
            return out["loss"]
    elif name == "cnn":
        model = ConvNet()

        def batch(_):
            return (torch.randn(4, 3, 6, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen))

        def loss_of(out, inputs):
            return F.cross_entropy(out, inputs[1])
    elif name == "lstm":
        model = Recurrent()

        def batch(_):
            return (torch.randn(3, 5, 6, generator=gen), torch.randn(3, 3, generator=gen))

        def loss_of(out, inputs):
            return F.mse_loss(out, inputs[1])
    elif name == "twice":
        model = Twice()

        def batch(_):
            return (torch.randn(3, 4, generator=gen),)

        def loss_of(out, _):
            return out
    else:
        raise KeyError(name)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, optimizer, batch, loss_of, autocast


CASES = ("transformer", "transformer_ckpt", "transformer_ckpt_nr", "transformer_autocast", "cnn", "lstm", "twice")


def forward(name: str, model, inputs):
    """The model's output for a batch: a (inputs..., target) batch passes its first part only, but the
    transformer, which takes the targets too."""
    if name.startswith("transformer"):
        return model(*inputs)
    if name == "twice":
        return model(inputs[0])
    return model(inputs[0])


def train(name: str, steps: int, monitor_config: str | None = None, grad_acc: int = 1, seed: int = 0,
          monitor_factory=None):
    """Train a zoo case; (losses, final state dict, the monitor or None)."""
    model, optimizer, batch, loss_of, autocast = case(name, seed)
    monitor = None
    if monitor_config is not None:
        from msprobe.pytorch import TrainerMon

        monitor = (monitor_factory or TrainerMon)(monitor_config, params_have_main_grad=False)
        monitor.set_monitor(model, optimizer=optimizer, grad_acc_steps=grad_acc)
    losses = []
    try:
        for step in range(steps):
            for _ in range(grad_acc):
                inputs = batch(step)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    out = forward(name, model, inputs)
                    loss = loss_of(out, inputs)
                (loss / grad_acc).backward()
                losses.append(loss.detach().clone())
            optimizer.step()
            optimizer.zero_grad()
    finally:
        if monitor is not None:
            monitor.close()
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, monitor
