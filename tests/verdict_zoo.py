"""More small models for the one-verdict checks (issue 27), beyond tests/culprits.py: a ResNet-style CNN, a
bidirectional GRU, a Transformer encoder layer with masks, a checkpointed MLP, an autocast model, an EmbeddingBag
recommender and a model with a tiny loss. Each side of a pair is dumped by our PyTorch collector in its own process
(`python verdict_zoo.py <model> <variant> <task> <level> <root> [threads]`), so that the thread count and
ATEN_CPU_CAPABILITY can differ between the two runs.

Variants: `base` (the golden), a culprit (`perturbed`, `eps`, `scale`, `dropout`, `half`) or a twin (`reorder`: one
linear sums its products in another order; any change of threads or vector width is a twin of `base`)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from culprits import seeded_batch
from torch import nn
from torch.overrides import handle_torch_function, has_torch_function
from torch.utils.checkpoint import checkpoint


def scaled_gelu(x, approximate="none"):
    """F.gelu whose output is 0.5 % too large (an extra scale in one activation), recorded as Functional.gelu."""
    if has_torch_function((x,)):
        return handle_torch_function(scaled_gelu, (x,), x, approximate=approximate)
    return F.gelu(x, approximate=approximate) * 1.005


def reordered_linear(x, weight, bias=None):
    """F.linear summing its products in two halves (a deterministic reordering: rounding only), recorded as
    Functional.linear."""
    tensors = [t for t in (x, weight, bias) if isinstance(t, torch.Tensor)]
    if has_torch_function(tensors):
        return handle_torch_function(reordered_linear, tensors, x, weight, bias)
    k = weight.shape[1] // 2
    out = x[..., k:] @ weight[:, k:].t() + x[..., :k] @ weight[:, :k].t()
    return out if bias is None else out + bias


def half_linear(x, weight, bias=None):
    """F.linear computed in float16 (one op in a lower precision), recorded as Functional.linear."""
    tensors = [t for t in (x, weight, bias) if isinstance(t, torch.Tensor)]
    if has_torch_function(tensors):
        return handle_torch_function(half_linear, tensors, x, weight, bias)
    b = None if bias is None else bias.half()
    return F.linear(x.half(), weight.half(), b).float()


def _register():
    from msprobe.pytorch.hooks import api_table

    table = api_table()
    table[scaled_gelu] = ("Functional", "gelu")
    table[reordered_linear] = ("Functional", "linear")
    table[half_linear] = ("Functional", "linear")


class SwitchLinear(nn.Linear):
    """A linear whose kernel is chosen by the variant (F.linear, reordered_linear or half_linear)."""

    def __init__(self, *args, kernel=F.linear):
        super().__init__(*args)
        self.kernel = kernel

    def forward(self, x):
        return self.kernel(x, self.weight, self.bias)


# ------------------------------------------------------------------------------------------------ models
class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x if self.down is None else self.down(x)
        out += short
        return self.relu(out)


class ResNet(nn.Module):
    """stem conv+BN+ReLU(inplace) -> block (identity shortcut) -> block (stride 2, conv+BN shortcut) -> pool -> fc.
    `perturbed`: layer2's conv2 weight is 1 % off (a perturbed weight in one layer)."""

    def __init__(self, variant):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layer1 = Block(8, 8, 1)
        self.layer2 = Block(8, 16, 2)
        self.fc = nn.Linear(16, 5)
        if variant == "perturbed":
            with torch.no_grad():
                self.layer2.conv2.weight.mul_(1.01)

    def forward(self, x):
        h = self.layer2(self.layer1(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    @staticmethod
    def inputs():
        return seeded_batch(21, (4, 3, 12, 12), 5)


class GruNet(nn.Module):
    """embedding -> bidirectional GRU -> LayerNorm (`eps`: eps 1e-1 instead of 1e-5) -> linear."""

    def __init__(self, variant):
        super().__init__()
        self.emb = nn.Embedding(30, 12)
        self.gru = nn.GRU(12, 16, batch_first=True, bidirectional=True)
        self.norm = nn.LayerNorm(32, eps=1e-1 if variant == "eps" else 1e-5)
        self.fc = nn.Linear(32, 4)

    def forward(self, ids):
        out, _ = self.gru(self.emb(ids))
        return self.fc(self.norm(out.mean(1)))

    @staticmethod
    def inputs():
        g = torch.Generator().manual_seed(22)
        return (torch.randint(0, 30, (5, 9), generator=g),), torch.randint(0, 4, (5,), generator=g)


class EncoderNet(nn.Module):
    """linear -> TransformerEncoderLayer (padding and causal masks, gelu) -> mean -> linear. `scale`: its
    activation is 0.5 % too large; `dropout`: its dropout is on (p=0.1, seeded) in this run only."""

    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.proj = nn.Linear(6, 16)
        act = scaled_gelu if variant == "scale" else F.gelu
        self.enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, activation=act, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x, pad):
        self.enc.train(self.variant == "dropout")
        causal = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        h = self.enc(self.proj(x), src_mask=causal, src_key_padding_mask=pad)
        return self.head(h.mean(1))

    @staticmethod
    def inputs():
        return seeded_batch(23, (3, 6, 6), 3, padded=(1, 4))


class CheckpointNet(nn.Module):
    """linear -> two blocks (linear, tanh, linear) under torch.utils.checkpoint -> linear. `half`: the second
    block's first linear in float16; `reorder`: it sums in another order."""

    def __init__(self, variant):
        super().__init__()
        kernel = {"half": half_linear, "reorder": reordered_linear}.get(variant, F.linear)
        self.inp = nn.Linear(10, 24)
        self.b1 = nn.Sequential(nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 24))
        self.b2 = nn.Sequential(SwitchLinear(24, 24, kernel=kernel), nn.Tanh(), nn.Linear(24, 24))
        self.out = nn.Linear(24, 4)

    def forward(self, x):
        h = self.inp(x)
        h = h + checkpoint(self.b1, h, use_reentrant=False)
        h = h + checkpoint(self.b2, h, use_reentrant=False)
        return self.out(h)

    @staticmethod
    def inputs():
        return seeded_batch(24, (6, 10), 4)


class AutocastNet(nn.Module):
    """conv -> relu -> linear -> linear, all under torch.autocast(cpu, bfloat16) in both runs."""

    def __init__(self, variant):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.fc1 = nn.Linear(8 * 10, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.relu(self.conv(x)).flatten(1)
            return self.fc2(F.relu(self.fc1(h))).float()

    @staticmethod
    def inputs():
        return seeded_batch(25, (5, 4, 10), 4)


class RecNet(nn.Module):
    """EmbeddingBag (mean) of sparse ids + dense features -> MLP. `half`: the MLP's first linear in float16."""

    def __init__(self, variant):
        super().__init__()
        self.bag = nn.EmbeddingBag(50, 8, mode="mean")
        self.dense = nn.Linear(5, 8)
        self.mlp1 = SwitchLinear(16, 32, kernel=half_linear if variant == "half" else F.linear)
        self.mlp2 = nn.Linear(32, 2)

    def forward(self, ids, offsets, dense):
        h = torch.cat([self.bag(ids, offsets), F.relu(self.dense(dense))], dim=1)
        return self.mlp2(F.relu(self.mlp1(h)))

    @staticmethod
    def inputs():
        g = torch.Generator().manual_seed(26)
        ids = torch.randint(0, 50, (20,), generator=g)
        offsets = torch.tensor([0, 3, 7, 12, 16])
        return (ids, offsets, torch.randn(5, 5, generator=g)), torch.randint(0, 2, (5,), generator=g)


class TinyLossNet(nn.Module):
    """linear -> gelu -> linear, whose loss is scaled by 1e-8 (gradients ~1e-10). `tanh`: the gelu is called with
    approximate="tanh" in this run only (an argument the other run does not pass)."""

    scale = 1e-8

    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.fc1 = nn.Linear(96, 256)
        self.fc2 = nn.Linear(256, 3)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(F.gelu(h, approximate="tanh") if self.variant == "tanh" else F.gelu(h))

    @staticmethod
    def inputs():
        return seeded_batch(27, (64, 96), 3)


MODELS = {"resnet": ResNet, "gru": GruNet, "encoder": EncoderNet, "checkpoint": CheckpointNet,
          "autocast": AutocastNet, "rec": RecNet, "tiny": TinyLossNet}


def train_step(name: str, variant: str, debugger=None):
    _register()
    torch.manual_seed(5)
    cls = MODELS[name]
    model = cls(variant)
    args, labels = cls.inputs()
    torch.manual_seed(7)                       # dropout's mask
    if debugger is not None:
        debugger.start(model)
    try:
        loss = F.cross_entropy(model(*args), labels) * getattr(cls, "scale", 1.0)
        loss.backward()
    finally:
        if debugger is not None:
            debugger.stop()


def dump(name: str, variant: str, task: str, level: str, root: Path, threads: int = 1) -> Path:
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(threads)
    extra = {"summary_mode": "md5"} if task == "md5" else {}
    debugger = PrecisionDebugger(task="statistics" if task == "md5" else task, level=level, dump_path=str(root),
                                 **extra)
    train_step(name, variant, debugger)
    (folder,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    return folder


def dump_in_process(name: str, variant: str, task: str, level: str, root: Path, threads: int = 1,
                    env: dict | None = None) -> Path:
    """Dump in a process of its own (its thread count and ATEN_CPU_CAPABILITY apply from the start)."""
    import os
    import subprocess

    here = Path(__file__).resolve()
    environ = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(
        [str(here.parents[1]), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, str(here), name, variant, task, level, str(root), str(threads)], check=True,
                   env=environ)
    (folder,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    return folder


if __name__ == "__main__":
    model, which, task_name, dump_level, out = sys.argv[1:6]
    dump(model, which, task_name, dump_level, Path(out), int(sys.argv[6]) if len(sys.argv) > 6 else 1)
