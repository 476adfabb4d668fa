"""A small PyTorch training script for `msprobe triage` (docs/triage.md): no msprobe in it. Three models (a CNN, a
transformer block, an LSTM) and one planted bug per --bug, so that

    msprobe triage --target "python train.py --bug eps" --golden "python train.py" -o triage_out

has something to find. --bug: none, cast (one linear in float16), eps (a layer norm's eps), bias (a linear's bias
dropped), softmax (the wrong axis), scale (an activation scaled), bf16acc (the attention scores accumulated in
bfloat16), nondet (a dropout whose seed changes from run to run), nan (a log of a negative number), bn_eps (a batch
norm's eps), residual (a residual block's skip connection dropped), rootscale (the features scaled in the model's own
forward, outside every sub-module), data (the model fed other data: images three times the golden's, other token
ids). --amp runs the forward under bfloat16 autocast (a mixed-precision target against a float32 golden)."""

import argparse
import time

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

BUGS = ("none", "cast", "eps", "bias", "softmax", "scale", "bf16acc", "nondet", "nan", "bn_eps", "residual",
        "rootscale", "data")


class Mix(nn.Module):
    """A residual block: x + proj(gelu(x)); --bug residual drops the skip connection."""

    def __init__(self, width, bug):
        super().__init__()
        self.bug = bug
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        h = self.proj(F.gelu(x))
        return h if self.bug == "residual" else x + h


class Head(nn.Module):
    """A batch norm and a residual block, attention pooling over the sequence, a norm, an activation and the
    classifier: where the bugs live."""

    def __init__(self, width, classes, bug):
        super().__init__()
        self.bug = bug
        self.query = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.hidden = nn.Linear(width, width)
        self.bn = nn.BatchNorm1d(width, eps=1e-1 if bug == "bn_eps" else 1e-5)
        self.mix = Mix(width, bug)
        self.out = nn.Linear(width, classes)

    def forward(self, x):                              # x: [batch, sequence, width]
        x = self.mix(F.relu(self.bn(x.transpose(1, 2)).transpose(1, 2), inplace=True))
        q = self.query(x)
        if self.bug == "bf16acc":
            scores = torch.matmul(q.bfloat16(), x.transpose(1, 2).bfloat16()).float()
        else:
            scores = torch.matmul(q, x.transpose(1, 2))
        weights = F.softmax(scores / x.shape[-1] ** 0.5, dim=-2 if self.bug == "softmax" else -1)
        x = torch.matmul(weights, x).mean(dim=1)
        eps = 1e-2 if self.bug == "eps" else 1e-5
        x = F.layer_norm(x, (x.shape[-1],), self.norm.weight, self.norm.bias, eps)
        if self.bug == "cast":
            x = F.linear(x.half(), self.hidden.weight.half(), self.hidden.bias.half()).float()
        elif self.bug == "bias":
            x = F.linear(x, self.hidden.weight)
        else:
            x = self.hidden(x)
        x = F.gelu(x) * 1.02 if self.bug == "scale" else F.gelu(x)
        if self.bug == "nondet":
            torch.manual_seed(time.time_ns() % 2**31)      # reseeded from the clock: each run drops other units
            x = F.dropout(x, 0.1)
        if self.bug == "nan":
            x = torch.log(x)
        return self.out(x)


class Cnn(nn.Module):
    def __init__(self, bug):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.head = Head(16, 10, bug)
        self.bug = bug

    def forward(self, images):
        x = F.max_pool2d(F.relu(self.conv1(images)), 2)
        x = F.relu(self.conv2(x))
        x = x.flatten(2).transpose(1, 2)
        return self.head(x * 1.5 if self.bug == "rootscale" else x)


class Transformer(nn.Module):
    def __init__(self, bug):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = Head(32, 10, bug)
        self.bug = bug

    def forward(self, tokens):
        x = self.block(self.embed(tokens))
        return self.head(x * 1.5 if self.bug == "rootscale" else x)


class Lstm(nn.Module):
    def __init__(self, bug):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 24, batch_first=True)
        self.head = Head(24, 10, bug)
        self.bug = bug

    def forward(self, tokens):
        x = self.lstm(self.embed(tokens))[0]
        return self.head(x * 1.5 if self.bug == "rootscale" else x)


MODELS = {"cnn": Cnn, "transformer": Transformer, "lstm": Lstm}


def batch(model_name, generator, bug="none"):
    if model_name == "cnn":
        images, labels = torch.randn(4, 3, 8, 8, generator=generator), torch.randint(0, 10, (4,), generator=generator)
        return (images * 3 if bug == "data" else images), labels
    tokens, labels = torch.randint(0, 50, (4, 12), generator=generator), torch.randint(0, 10, (4,), generator=generator)
    return ((tokens * 3) % 50 if bug == "data" else tokens), labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="transformer")
    parser.add_argument("--bug", choices=BUGS, default="none")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--amp", action="store_true", help="run the forward under bfloat16 autocast")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = MODELS[args.model](args.bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        inputs, labels = batch(args.model, data, args.bug)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
