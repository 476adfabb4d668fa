"""A tiny PyTorch training loop for msprobe triage's tests (tests/triage/test_zoo.py, test_runs.py copy it into a
temporary folder as train.py): no msprobe in it unless asked.

--crash        raises in the first step, after the forward (the step is recorded as far as it went)
--crash-early  raises before the first step
--hang         sleeps for 600 s inside the first forward (in a module of the model), after printing "hanging"
--own          its own PrecisionDebugger (task tensor, level L1, its own dump_path) started with the model
--own-nomodel  its own PrecisionDebugger (level L1) whose step_scope() names no model
--nomodel      computes with torch and calls no nn.Module
--steps N      N steps (default 3)
"""

import contextlib
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
if "--crash-early" in sys.argv:
    raise RuntimeError("planted crash before the first step")
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
if "--nomodel" in sys.argv:
    weight = torch.ones(6, 2, requires_grad=True)
    for _ in range(steps):
        (torch.linspace(-1, 1, 24).reshape(4, 6) @ weight).pow(2).mean().backward()
    print("done", flush=True)
    raise SystemExit(0)


class Hang(nn.Module):
    def forward(self, x):
        if "--hang" in sys.argv:
            print("hanging", flush=True)
            time.sleep(600)
        return x


model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), Hang(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
debugger = None
if "--own" in sys.argv or "--own-nomodel" in sys.argv:
    from msprobe.pytorch import PrecisionDebugger

    own = "--own" in sys.argv
    debugger = PrecisionDebugger(dump_path="./own_dump", task="tensor" if own else "statistics", level="L1")
for step in range(steps):
    scope = debugger.step_scope(model if "--own" in sys.argv else None) if debugger else contextlib.nullcontext()
    with scope:
        loss = model(torch.linspace(-1, 1, 24).reshape(4, 6) * (step + 1)).pow(2).mean()
        if "--crash" in sys.argv:
            raise RuntimeError("planted crash")
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(repr(loss.item()), flush=True)
