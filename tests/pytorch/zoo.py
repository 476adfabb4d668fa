"""A zoo of small CPU models that exercise what real training scripts do: BatchNorm with in-place ReLU, residual
in-place adds, LSTM/GRU, attention with padding masks, activation checkpointing, tuple/dict outputs, parameters used
directly as op inputs, in-place ops on views, bf16 autocast, padding embeddings, outputs
that their module also uses inside, and torch.compile.

Only torch is imported, so the same file drives the reference collector in a black-box comparison."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.utils.checkpoint import checkpoint


class BasicBlock(nn.Module):
    """A ResNet basic block: the residual is added in place, the activations are in place."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.block = BasicBlock(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.block(self.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


class Recurrent(nn.Module):
    """Embedding with padding_idx -> LSTM (its output tuple holds a tuple) -> GRU -> Linear."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.lstm = nn.LSTM(6, 8, batch_first=True)
        self.gru = nn.GRU(8, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, ids):
        out, (_, _) = self.lstm(self.emb(ids))
        out, _ = self.gru(out)
        return self.head(out[:, -1])


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x, pad):
        h = self.proj(x)
        out, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        return self.head(out.mean(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x, pad):
        return self.head(self.layer(x, src_key_padding_mask=pad).mean(1))


class Checkpointed(nn.Module):
    """One block recomputed by the non-reentrant checkpoint, one by the reentrant one."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.block1 = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
        self.block2 = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.inp(x)
        h = checkpoint(self.block1, h, use_reentrant=False)
        h = checkpoint(self.block2, h, use_reentrant=True)
        return self.head(h)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.a = nn.Linear(8, 3)
        self.b = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.a(h), self.b(h)


class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = TwoHeads()

    def forward(self, x):
        logits, aux = self.heads(x)
        return logits + aux, aux


class DictHeads(TwoHeads):
    def forward(self, x):
        logits, aux = super().forward(x)
        return {"logits": logits, "aux": aux}


class DictOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = DictHeads()

    def forward(self, x):
        out = self.heads(x)
        return {"logits": out["logits"] * out["aux"].sigmoid(), "aux": out["aux"]}


class Scale(nn.Module):
    def forward(self, x, weight):
        return x * weight


class ParamOps(nn.Module):
    """nn.Parameters used directly as op inputs, and passed to a sub-module as an argument."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8) * 0.3)
        self.b = nn.Parameter(torch.zeros(8))
        self.gain = nn.Parameter(torch.ones(8))
        self.scale = Scale()
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.addmm(self.b, x, self.w)
        h = self.scale(torch.relu(h), self.gain)
        return self.head(h @ torch.eye(8) + self.b)


class Doubler(nn.Module):
    """Modifies its input in place (like ReLU(inplace=True) or Dropout(inplace=True))."""

    def forward(self, x):
        return x.mul_(2.0)


class InplaceViews(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.twice = Doubler()
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        y = self.lin(x)
        y[:, 0] *= 2.0
        y[:, 1:3].add_(1.0)
        y.t()[3].mul_(0.5)
        y = self.twice(y)
        torch.relu_(y[:1])
        return self.head(y)


class Autocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.gelu(self.fc1(x))
            out = self.fc2(h)
        return out.float()


class Weighted(nn.Module):
    """An eager attention returning (output, weights), like transformers' LlamaAttention: the weights compute the
    output inside, and callers often drop them."""

    def __init__(self):
        super().__init__()
        self.qk = nn.Linear(8, 8)

    def forward(self, h):
        weights = torch.softmax(self.qk(h) @ h.transpose(1, 2), -1)
        return weights @ h, weights


class Pooled(nn.Module):
    """Like a BertModel: (hidden state, pooled), the pooler reading the hidden state; and its input as it is."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 8)
        self.pool = nn.Linear(8, 8)

    def forward(self, x):
        hidden = self.layer(x) * 1.5     # not a view (a 3-d Linear's output is): the caller modifies it in place
        return hidden, torch.tanh(self.pool(hidden.mean(1))), x


class ReturnedInside(nn.Module):
    """Outputs their module also uses inside: dropped, kept and used several times, modified in place and through a
    view by the caller, inside a checkpoint; an input returned as it is; and a 3-d Linear's output (a view of its
    2-d result) modified in place by the next module."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.act = nn.ReLU(inplace=True)
        self.attn = Weighted()
        self.body = Pooled()
        self.head = nn.Linear(8, 3)

    def forward(self, x, pad):
        h = self.act(self.inp(x))
        out, _ = self.attn(h)
        again, weights = checkpoint(self.attn, out, use_reentrant=True)
        hidden, pooled, same = self.body(again + weights.masked_fill(pad[:, None, :], 0.0).mean(-1, keepdim=True))
        hidden.add_(1.0)
        hidden[:, 0] *= 2.0
        return self.head(hidden.mean(1) + pooled + hidden[:, -1] + same.mean(1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _features(g):
    return (torch.randn(4, 4, generator=g),)


def _sequence(g):
    x = torch.randn(3, 5, 4, generator=g)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[0, 3:] = True
    pad[2, 4:] = True
    return x, pad


def _encoder_batch(g):
    x, pad = _sequence(g)
    return torch.randn(3, 5, 8, generator=g), pad


def _ids(g):
    ids = torch.randint(1, 10, (3, 5), generator=g)
    ids[0, :2] = 0
    return (ids,)


def _images(g):
    return (torch.randn(2, 3, 6, 6, generator=g),)


def _logits(out):
    if isinstance(out, dict):
        return out["logits"] + 0.1 * out["aux"].pow(2).mean()
    if isinstance(out, tuple):
        return out[0] + 0.1 * out[1].pow(2).mean()
    return out


class Partly(nn.Module):
    """A torch.compile'd body followed by an eager head."""

    def __init__(self, backend="inductor"):
        super().__init__()
        self.body = torch.compile(Mlp(), backend=backend)
        self.head = nn.Linear(3, 3)

    def forward(self, x):
        return self.head(self.body(x))


# name -> (model factory, batch factory, optimizer class)
MODELS = {
    "cnn": (Cnn, _images, "sgd"),
    "rnn": (Recurrent, _ids, "adam"),
    "mha": (Attention, _sequence, "sgd"),
    "transformer": (Encoder, _encoder_batch, "adam"),
    "checkpoint": (Checkpointed, _features, "sgd"),
    "tuple_out": (TupleOut, _features, "sgd"),
    "dict_out": (DictOut, _features, "sgd"),
    "param_ops": (ParamOps, _features, "sgd"),
    "inplace_views": (InplaceViews, _features, "sgd"),
    "autocast": (Autocast, _features, "adam"),
    "returned_inside": (ReturnedInside, _sequence, "adam"),
    "compiled": (Partly, _features, "sgd"),
}


def build(name: str):
    factory, _, _ = MODELS[name]
    torch.manual_seed(0)
    return factory()


def train(name: str, debugger=None, steps: int = 2, model=None):
    """Train zoo model `name` for `steps` steps (SGD with momentum or Adam, cross-entropy on 3 classes), with the
    debugger's start/stop/step around each step when one is given. Returns (losses, final state_dict copies)."""
    _, batch, optimizer = MODELS[name]
    model = model if model is not None else build(name)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9) if optimizer == "sgd" else torch.optim.Adam(params, lr=0.01)
    batches = [batch(torch.Generator().manual_seed(step)) for step in range(steps)]
    labels = torch.Generator().manual_seed(99)
    losses = []
    for inputs in batches:
        target = torch.randint(0, 3, (inputs[0].shape[0],), generator=labels)
        if debugger is not None:
            debugger.start(model)
        loss = F.cross_entropy(_logits(model(*inputs)), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if debugger is not None:
            debugger.stop()
            debugger.step()
        losses.append(loss.detach().clone())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return losses, state
