"""One child run of `bench_monitor.py --framework mindspore`: the MindSpore tiny GPT
(tests/fixtures/mindspore_model/tiny_gpt_ms.py) trained with nn.AdamWeightDecay by a `ms.value_and_grad` step
(PyNative, CPU, one thread, synchronous kernels), optionally under a TrainerMon (msprobe.mindspore: ours from
PYTHONPATH, or the reference's in its own interpreter); prints {"cpu_per_step", "loss"} as JSON.

What the reference's MindSpore monitor needs to run at all, done in every child alike (so the plain runs pay it
too): its weight-gradient monitor reads `param.grad` (MindSpore's value_and_grad sets none), so the script sets it;
it records activations only for cells in training mode (`set_train(True)`); it wraps the optimizer's construct,
which MindSpore 2.10 compiles with @jit, so the parent runs every child with MS_JIT=0; its statistics call
mint.norm, which has no CPU kernel, so the reference's children get a numpy norm instead (as the refdata scripts
do)."""

import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures", "mindspore_model"))

import mindspore as ms  # noqa: E402
from mindspore import Tensor, mint, nn  # noqa: E402

args = json.loads(sys.argv[1])
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
ms.set_context(runtime_num_threads=1, inter_op_parallel_num=1)
ms.runtime.dispatch_threads_num(1)
ms.runtime.launch_blocking()
if args.get("reference"):
    def _cpu_norm(x, *_, **__):
        array = x.asnumpy()
        return Tensor(np.asarray(np.linalg.norm(array.astype(np.float64).ravel()), dtype=array.dtype))
    mint.norm = _cpu_norm

from tiny_gpt_ms import TinyGPT, initialise  # noqa: E402

model = TinyGPT(vocab=args["vocab"], d_model=args["d_model"], n_head=4, n_layer=args["n_layer"], max_seq=args["seq"])
initialise(model)
model.set_train(True)
opt = nn.AdamWeightDecay(model.trainable_params(), learning_rate=1e-3, weight_decay=0.01)
rng = np.random.default_rng(args.get("data_seed", 42))
total = args["warmup"] + args["steps"]
data = [(Tensor(rng.integers(0, args["vocab"], (args["batch"], args["seq"])).astype(np.int32)),
         Tensor(rng.integers(0, args["vocab"], (args["batch"], args["seq"])).astype(np.int32))) for _ in range(total)]
if args["config"]:
    os.environ["MONITOR_OUTPUT_DIR"] = args["out"]
    from msprobe.mindspore import TrainerMon

    monitor = TrainerMon(args["config"], params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=opt, grad_acc_steps=1)
grad_fn = ms.value_and_grad(model, None, opt.parameters)
profiler = None
if args["profile"]:
    import cProfile

    profiler = cProfile.Profile(time.process_time)
for i, (idx, tgt) in enumerate(data):
    if i == args["warmup"]:
        start = time.process_time()
        if profiler:
            profiler.enable()
    loss, grads = grad_fn(idx, tgt)
    for param, grad in zip(opt.parameters, grads):
        param.grad = grad
    opt(grads)
    loss.asnumpy()
cpu = time.process_time() - start
if profiler:
    import pstats

    profiler.disable()
    pstats.Stats(profiler, stream=sys.stderr).sort_stats(args.get("sort", "tottime")).print_stats(25)
print(json.dumps({"cpu_per_step": cpu / args["steps"], "loss": float(loss.asnumpy())}))
