"""A small MindSpore (CPU) training script for `msprobe triage`'s zoo (tests/mindspore_collector/test_triage_ms.py,
benchmarks/bench_triage.py): no msprobe in it, a plain training loop. Three models (a CNN, a transformer block, an
LSTM) and one planted bug per --bug, as examples/triage/train.py for PyTorch: cast (one dense in float16), eps (a
layer norm's epsilon), bias (a dense's bias dropped), softmax (the wrong axis), scale (an activation scaled),
bf16acc (attention scores accumulated in float16: CPU has no bfloat16 matmul), nondet (a dropout whose seed changes
from run to run; PyNative only), nan (a log of a negative number). --train grad (the default) is a
`value_and_grad` loop, --train onestep the standard `nn.TrainOneStepCell(nn.WithLossCell(model, loss), nn.SGD)`;
--mode graph runs it in GRAPH_MODE (with onestep the whole step compiled; with grad the forward and backward,
the optimizer called from Python). Only ops with CPU kernels in MindSpore 2.10."""

import argparse
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

BUGS = ("none", "cast", "eps", "bias", "softmax", "scale", "bf16acc", "nondet", "nan")


class Head(nn.Cell):
    """Attention pooling over the sequence, a norm, an activation and the classifier: where the bugs live."""

    def __init__(self, width, classes, bug):
        super().__init__()
        self.bug = bug
        self.query = nn.Dense(width, width)
        self.norm = nn.LayerNorm((width,), epsilon=1e-2 if bug == "eps" else 1e-5)
        self.hidden = nn.Dense(width, width)
        self.out = nn.Dense(width, classes)

    def construct(self, x):                              # x: [batch, sequence, width]
        q = self.query(x)
        if self.bug == "bf16acc":
            scores = ops.matmul(q.astype(ms.float16), x.transpose(0, 2, 1).astype(ms.float16)).astype(ms.float32)
        else:
            scores = ops.matmul(q, x.transpose(0, 2, 1))
        weights = ops.softmax(scores / x.shape[-1] ** 0.5, axis=-2 if self.bug == "softmax" else -1)
        x = ops.matmul(weights, x).mean(axis=1)
        x = self.norm(x)
        if self.bug == "cast":
            x = ops.dense(x.astype(ms.float16), self.hidden.weight.astype(ms.float16),
                          self.hidden.bias.astype(ms.float16)).astype(ms.float32)
        elif self.bug == "bias":
            x = ops.dense(x, self.hidden.weight)
        else:
            x = ops.dense(x, self.hidden.weight, self.hidden.bias)
        x = ops.gelu(x) * 1.02 if self.bug == "scale" else ops.gelu(x)
        if self.bug == "nondet":
            x = ops.dropout(x, p=0.1, seed=time.time_ns() % 2**31)    # another seed in each run
        if self.bug == "nan":
            x = ops.log(x)
        return self.out(x)


class Cnn(nn.Cell):
    def __init__(self, bug):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, pad_mode="pad", padding=1, has_bias=True)
        self.conv2 = nn.Conv2d(8, 16, 3, pad_mode="pad", padding=1, has_bias=True)
        self.pool = nn.MaxPool2d(2, 2)
        self.head = Head(16, 10, bug)

    def construct(self, images):
        x = self.pool(ops.relu(self.conv1(images)))
        x = ops.relu(self.conv2(x))
        return self.head(x.reshape(x.shape[0], x.shape[1], -1).transpose(0, 2, 1))


class Transformer(nn.Cell):
    def __init__(self, bug):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.block = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = Head(32, 10, bug)

    def construct(self, tokens):
        return self.head(self.block(self.embed(tokens)))


class Lstm(nn.Cell):
    def __init__(self, bug):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 24, batch_first=True)
        self.head = Head(24, 10, bug)

    def construct(self, tokens):
        return self.head(self.lstm(self.embed(tokens))[0])


MODELS = {"cnn": Cnn, "transformer": Transformer, "lstm": Lstm}


def batch(model_name, rng):
    labels = Tensor(rng.integers(0, 10, (4,)).astype(np.int32))
    if model_name == "cnn":
        return Tensor(rng.standard_normal((4, 3, 8, 8)).astype(np.float32)), labels
    return Tensor(rng.integers(0, 50, (4, 12)).astype(np.int32)), labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="transformer")
    parser.add_argument("--bug", choices=BUGS, default="none")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--train", choices=("grad", "onestep"), default="grad")
    parser.add_argument("--mode", choices=("pynative", "graph"), default="pynative")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(0)
    model = MODELS[args.model](args.bug)
    optimizer = nn.SGD(model.trainable_params(), learning_rate=0.05)
    rng = np.random.default_rng(1)
    if args.train == "onestep":
        train = nn.TrainOneStepCell(nn.WithLossCell(model, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                           reduction="mean")),
                                    optimizer)
        train.set_train()
        for step in range(args.steps):
            loss = train(*batch(args.model, rng))
            print(f"step {step}: loss {float(loss.asnumpy()):.6f}")
        return

    def forward(inputs, labels):
        return ops.cross_entropy(model(inputs), labels)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    for step in range(args.steps):
        inputs, labels = batch(args.model, rng)
        loss, grads = grad_fn(inputs, labels)
        optimizer(grads)
        print(f"step {step}: loss {float(loss.asnumpy()):.6f}")


if __name__ == "__main__":
    main()
