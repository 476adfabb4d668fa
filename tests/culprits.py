"""Small models with one known culprit, dumped by our PyTorch collector (issue 27): every view of a compare (the
table's verdict, the advisor, the console summary, -da, the HTML page and msprobe graph) must name the culprit.

* `cnn`: conv -> BatchNorm -> ReLU -> conv2 -> BatchNorm -> ReLU -> pool -> linear; the target runs conv2 in
  bfloat16 (autocast around the module, its output cast back to float32). Culprit `Functional.conv2d.1.forward`,
  innermost module `Module.conv2.Conv2d.forward.0`. The conv biases feed BatchNorm, so their gradients are ~0:
  the rounding floor of their inputs (the noise notes).
* `lstm`: embedding -> LSTM -> linear fc1 (the culprit: the target's kernel perturbs its output by about 1 %) ->
  tanh -> linear fc2. Culprit `Functional.linear.0.forward`, module `Module.fc1.Linear.forward.0`.
* `attention`: linear -> multi-head self-attention with a key-padding mask -> linear out (perturbed) -> mean ->
  linear head. Culprit: the out projection's `Functional.linear` call, module `Module.out.Linear.forward.0`.

Both runs start from the same weights (seeded) and inputs; only the culprit differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from torch.overrides import handle_torch_function, has_torch_function


@dataclass(frozen=True)
class Culprit:
    api: str            # the culprit API's forward entry
    module: str         # the innermost module holding it (forward entry)


def perturbed_linear(x, weight, bias=None):
    """F.linear that reads its weight 1 % wrong element by element (a faulty kernel); recorded by the collector as
    Functional.linear (registered in its API table) with the inputs of the real call. The output keeps F.linear's
    autograd node (addmm), so the backward entry records the same gradients as an intact linear's."""
    tensors = [t for t in (x, weight, bias) if isinstance(t, torch.Tensor)]
    if has_torch_function(tensors):
        return handle_torch_function(perturbed_linear, tensors, x, weight, bias)
    wrong = 1 + 0.01 * torch.sin(torch.arange(weight.numel(), dtype=weight.dtype).reshape(weight.shape) * 0.7)
    return F.linear(x, weight * wrong, bias)


def _register():
    from msprobe.pytorch.hooks import api_table

    api_table()[perturbed_linear] = ("Functional", "linear")


def seeded_batch(seed: int, shape: tuple, classes: int, padded: tuple | None = None) -> tuple:
    """((a random input of this shape[, its key-padding mask],), random labels below classes, one per sample), from
    seed; padded = (sample, first padded position) adds a boolean mask of shape[:2] padding that sample's tail."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    labels = torch.randint(0, classes, (shape[0],), generator=g)
    if padded is None:
        return (x,), labels
    pad = torch.zeros(*shape[:2], dtype=torch.bool)
    pad[padded[0], padded[1]:] = True
    return (x, pad), labels


class BnCnn(nn.Module):
    def __init__(self, low: bool):
        super().__init__()
        self.low = low
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        if self.low:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.conv2(h)
            h = h.float()
        else:
            h = self.conv2(h)
        h = F.relu(self.bn2(h))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))

    @staticmethod
    def inputs():
        return seeded_batch(11, (4, 3, 8, 8), 4)


class PerturbableLinear(nn.Linear):
    def __init__(self, *args, perturbed: bool = False):
        super().__init__(*args)
        self.perturbed = perturbed

    def forward(self, x):
        return (perturbed_linear if self.perturbed else F.linear)(x, self.weight, self.bias)


class LstmNet(nn.Module):
    def __init__(self, low: bool):
        super().__init__()
        self.emb = nn.Embedding(20, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.fc1 = PerturbableLinear(32, 32, perturbed=low)
        self.fc2 = nn.Linear(32, 5)

    def forward(self, ids):
        out, _ = self.lstm(self.emb(ids))
        return self.fc2(torch.tanh(self.fc1(out[:, -1])))

    @staticmethod
    def inputs():
        g = torch.Generator().manual_seed(12)
        return (torch.randint(0, 20, (4, 7), generator=g),), torch.randint(0, 5, (4,), generator=g)


class AttnNet(nn.Module):
    def __init__(self, low: bool):
        super().__init__()
        self.proj = nn.Linear(6, 16)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = PerturbableLinear(16, 16, perturbed=low)
        self.head = nn.Linear(16, 3)

    def forward(self, x, pad):
        h = self.proj(x)
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        return self.head(self.out(a).mean(1))

    @staticmethod
    def inputs():
        return seeded_batch(13, (3, 5, 6), 3, padded=(0, 3))


MODELS = {"cnn": BnCnn, "lstm": LstmNet, "attention": AttnNet}
CULPRITS = {
    "cnn": Culprit("Functional.conv2d.1.forward", "Module.conv2.Conv2d.forward.0"),
    "lstm": Culprit("Functional.linear.0.forward", "Module.fc1.PerturbableLinear.forward.0"),
    # proj is Functional.linear.0; the attention's projections run inside F.multi_head_attention_forward, which is
    # recorded as one call
    "attention": Culprit("Functional.linear.1.forward", "Module.out.PerturbableLinear.forward.0"),
}


def train_step(name: str, low: bool, debugger=None):
    """One forward/backward step of model `name` (target when low), dumped by debugger when given; returns the
    model (for the next-dump test, which runs it again)."""
    _register()
    torch.manual_seed(5)
    model = MODELS[name](low)
    args, labels = MODELS[name].inputs()
    if debugger is not None:
        debugger.start(model)
    try:
        loss = F.cross_entropy(model(*args), labels)
        loss.backward()
    finally:
        if debugger is not None:
            debugger.stop()
    return model


def dump(name: str, root: Path, low: bool, task: str = "statistics", level: str = "mix", **config) -> Path:
    """Dump one step of model `name` into root; returns the dump folder (holding dump.json)."""
    from msprobe.pytorch import PrecisionDebugger

    torch.set_num_threads(1)
    debugger = PrecisionDebugger(task=task, level=level, dump_path=str(root), **config)
    train_step(name, low, debugger)
    (folder,) = [p for p in (root / "step0").iterdir() if p.is_dir()]
    return folder


def dump_pair(name: str, root: Path, task: str = "statistics", level: str = "mix") -> tuple[Path, Path]:
    """(target folder, golden folder) of model `name`."""
    return dump(name, root / "target", True, task, level), dump(name, root / "golden", False, task, level)
