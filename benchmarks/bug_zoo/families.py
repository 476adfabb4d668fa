"""The three model families of the bug zoo, written with functional calls so that every op a bug may replace is
one call site: a transformer block, a CNN with BatchNorm and a squeeze-excitation gate, and a GRU with
attention pooling. `ops` (a namespace of DEFAULT_SITES) holds the callables of the call sites; a bug replaces one
of them by a kernel."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812

# the keyword arguments F.cross_entropy passes on to a TorchFunctionMode, so that a kernel standing in for it is
# recorded with the same arguments (likewise weight=/bias=/eps= of the norms and _stacklevel=/dtype= of softmax)
LOSS_KWARGS = {"weight": None, "size_average": None, "ignore_index": -100, "reduce": None, "reduction": "mean",
               "label_smoothing": 0.0}


def _param(*shape, scale=1.0, generator=None):
    return torch.nn.Parameter(torch.randn(*shape, generator=generator) * scale)


class Transformer(torch.nn.Module):
    """One pre-LN transformer block (4 heads) and a classifier head; the input carries an offset (mean 4)."""

    DEFAULT_SITES = {"ln1": F.layer_norm, "ln2": F.layer_norm, "scale": lambda a, s: a * s,
                     "softmax": F.softmax, "qkv": F.linear, "fc1": F.linear, "gelu": F.gelu, "fc2": F.linear,
                     "loss": F.cross_entropy}

    def __init__(self, seed: int, d: int = 64, heads: int = 4, vocab: int = 32):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.d, self.heads = d, heads
        self.ln1_w, self.ln1_b = _param(d, scale=0.1, generator=g), _param(d, scale=0.1, generator=g)
        self.ln2_w, self.ln2_b = _param(d, scale=0.1, generator=g), _param(d, scale=0.1, generator=g)
        with torch.no_grad():
            self.ln1_w += 1
            self.ln2_w += 1
        self.qkv_w, self.qkv_b = _param(3 * d, d, scale=d ** -0.5, generator=g), _param(3 * d, scale=0.02, generator=g)
        self.proj_w, self.proj_b = _param(d, d, scale=d ** -0.5, generator=g), _param(d, scale=0.02, generator=g)
        self.fc1_w, self.fc1_b = _param(4 * d, d, scale=d ** -0.5, generator=g), _param(4 * d, scale=0.02, generator=g)
        self.fc2_w, self.fc2_b = (_param(d, 4 * d, scale=(4 * d) ** -0.5, generator=g),
                                  _param(d, scale=0.02, generator=g))
        self.head_w = _param(vocab, d, scale=1.5, generator=g)

    def forward(self, x, target, ops):
        b, t, d = x.shape
        hd = d // self.heads
        h = ops.ln1(x, (d,), weight=self.ln1_w, bias=self.ln1_b, eps=1e-5)
        q, k, v = ops.qkv(h, self.qkv_w, self.qkv_b).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        scores = ops.scale(torch.matmul(q, k.transpose(-2, -1)), 1.0 / math.sqrt(hd))
        attn = ops.softmax(scores, dim=-1, _stacklevel=3, dtype=None)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, d)
        x = x + F.linear(y, self.proj_w, self.proj_b)
        h = ops.ln2(x, (d,), weight=self.ln2_w, bias=self.ln2_b, eps=1e-5)
        h = ops.fc2(ops.gelu(ops.fc1(h, self.fc1_w, self.fc1_b)), self.fc2_w, self.fc2_b)
        x = x + h
        logits = F.linear(x, self.head_w).reshape(b * t, -1)
        return ops.loss(logits, target.reshape(-1), **LOSS_KWARGS)

    @staticmethod
    def inputs(seed: int):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(2, 32, 64, generator=g) + 4.0, torch.randint(0, 32, (2, 32), generator=g)


class CNN(torch.nn.Module):
    """A GELU on the input, three conv + BatchNorm stages (ReLU, GELU, ReLU; no in-place activation), a
    squeeze-excitation gate whose descriptor is a mean over the width then the height, global average pooling and
    a linear classifier."""

    DEFAULT_SITES = {"conv3": F.conv2d, "bn2": F.batch_norm, "bn3": F.batch_norm, "gelu": F.gelu,
                     "pool": F.adaptive_avg_pool2d, "se_mean": torch.Tensor.mean, "loss": F.cross_entropy}

    def __init__(self, seed: int, classes: int = 10):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.convs = torch.nn.ParameterList()
        self.bns = torch.nn.ModuleList()
        for c_in, c_out in ((3, 16), (16, 32), (32, 32)):
            self.convs.append(_param(c_out, c_in, 3, 3, scale=(c_in * 9) ** -0.5, generator=g))
            self.convs.append(_param(c_out, scale=0.1, generator=g))
            self.bns.append(torch.nn.BatchNorm2d(c_out))
        with torch.no_grad():
            self.convs[3] += 6.0     # conv2's bias: the BatchNorm after it sees an offset (mean about 6)
        self.se_w = _param(32, 32, scale=32 ** -0.5, generator=g)
        self.head_w = _param(classes, 32, scale=8.0, generator=g)

    def forward(self, x, target, ops):
        conv = (F.conv2d, F.conv2d, ops.conv3)
        bn = (F.batch_norm, ops.bn2, ops.bn3)
        act = (F.relu, F.gelu, F.relu)
        x = ops.gelu(x)
        for i in range(3):
            norm = self.bns[i]
            x = conv[i](x, self.convs[2 * i], self.convs[2 * i + 1], padding=1)
            x = bn[i](x, norm.running_mean, norm.running_var, weight=norm.weight, bias=norm.bias, training=True,
                      momentum=0.1, eps=1e-5)
            x = act[i](x)
        squeeze = ops.se_mean(x, dim=-1).mean(dim=-1)
        gate = torch.sigmoid(F.linear(squeeze, self.se_w))
        x = x * gate[:, :, None, None]
        pooled = ops.pool(x, 1).flatten(1)
        return ops.loss(F.linear(pooled, self.head_w), target, **LOSS_KWARGS)

    @staticmethod
    def inputs(seed: int):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)


class GRU(torch.nn.Module):
    """A GELU on the input features, a GRU unrolled over 12 steps, attention pooling over time, an MLP (GELU,
    LayerNorm) and a classifier."""

    DEFAULT_SITES = {"scale": lambda a, s: a * s, "softmax": F.softmax, "fc2": F.linear, "gelu": F.gelu,
                     "ln": F.layer_norm, "loss": F.cross_entropy}

    def __init__(self, seed: int, n_in: int = 32, hidden: int = 64, classes: int = 10):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.hidden = hidden
        self.wx, self.bx = _param(3 * hidden, n_in, scale=n_in ** -0.5, generator=g), _param(3 * hidden, scale=0.1,
                                                                                             generator=g)
        self.wh, self.bh = _param(3 * hidden, hidden, scale=hidden ** -0.5, generator=g), _param(3 * hidden, scale=0.1,
                                                                                                 generator=g)
        self.att = _param(1, hidden, scale=hidden ** -0.5 * 4, generator=g)
        self.fc1_w = _param(4 * hidden, hidden, scale=hidden ** -0.5, generator=g)
        self.fc2_w = _param(hidden, 4 * hidden, scale=(4 * hidden) ** -0.5, generator=g)
        self.fc2_b = _param(hidden, scale=0.1, generator=g)
        self.ln_w, self.ln_b = _param(hidden, scale=0.1, generator=g), _param(hidden, scale=0.1, generator=g)
        with torch.no_grad():
            self.ln_w += 1
        self.head_w = _param(classes, hidden, scale=8.0, generator=g)

    def forward(self, x, target, ops):
        b, t, _ = x.shape
        x = ops.gelu(x)
        h = torch.zeros(b, self.hidden)
        states = []
        for step in range(t):
            gx = F.linear(x[:, step], self.wx, self.bx)
            gh = F.linear(h, self.wh, self.bh)
            rx, zx, nx = gx.chunk(3, dim=-1)
            rh, zh, nh = gh.chunk(3, dim=-1)
            r = torch.sigmoid(rx + rh)
            z = torch.sigmoid(zx + zh)
            n = torch.tanh(nx + r * nh)
            h = (1 - z) * n + z * h
            states.append(h)
        seq = torch.stack(states, dim=1)
        scores = ops.scale(F.linear(seq, self.att).squeeze(-1), 1.0 / math.sqrt(self.hidden))
        weights = ops.softmax(scores, dim=-1, _stacklevel=3, dtype=None)
        pooled = (weights[:, :, None] * seq).sum(dim=1)
        y = ops.fc2(F.gelu(F.linear(pooled, self.fc1_w)), self.fc2_w, self.fc2_b)
        y = y + 3.0     # the LayerNorm sees an offset (mean 3)
        y = ops.ln(y, (self.hidden,), weight=self.ln_w, bias=self.ln_b, eps=1e-5)
        return ops.loss(F.linear(y, self.head_w), target, **LOSS_KWARGS)

    @staticmethod
    def inputs(seed: int):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(4, 12, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


FAMILIES = {"transformer": Transformer, "cnn": CNN, "gru": GRU}
