"""Trained by tests/monitor/test_distributed.py under torchrun (2 ranks, gloo): DDP with TrainerMon; writes, per
rank, the norms of its local gradients (computed on a copy of the model without DDP) and of DDP's reduced ones."""

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from msprobe.pytorch import MonitorStop, TrainerMon

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
local = copy.deepcopy(model)
ddp = DistributedDataParallel(model)
optimizer = torch.optim.AdamW(ddp.parameters(), lr=0.01)
monitor = TrainerMon(sys.argv[1], params_have_main_grad=False)
monitor.set_monitor(ddp, optimizer=optimizer, grad_acc_steps=1)
nan_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
gen = torch.Generator().manual_seed(100 + rank)
norms = []
try:
    for step in range(4):
        x = torch.randn(3, 4, generator=gen)
        if step == nan_at and rank == 0:
            x[0, 0] = float("nan")
        local.load_state_dict(model.state_dict())
        local.zero_grad()
        local(x).pow(2).mean().backward()
        ddp(x).pow(2).mean().backward()
        norms.append({"local": {n: p.grad.norm().item() for n, p in local.named_parameters()},
                      "reduced": {n: p.grad.norm().item() for n, p in model.named_parameters()}})
        optimizer.step()
        optimizer.zero_grad()
except MonitorStop as stop:
    print(f"rank {rank} stopped: {stop}", flush=True)
finally:
    with open(os.path.join(sys.argv[2], f"norms{rank}.json"), "w") as handle:
        json.dump(norms, handle)
    monitor.close()
    dist.destroy_process_group()
