"""Trained by tests/monitor/test_distributed.py under torchrun (2 ranks, gloo): DDP (or FSDP2's fully_shard, when
the 4th argument is "fsdp2") with TrainerMon; writes, per rank, the norms of its local gradients (computed on a copy
of the model without DDP) and of the reduced ones (FSDP2: this rank's shards)."""

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
sharded = len(sys.argv) > 4 and sys.argv[4] == "fsdp2"
if sharded:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    ddp = fully_shard(model, mesh=mesh)
else:
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
        if not sharded:
            local.load_state_dict(model.state_dict())
        local.zero_grad()
        local(x).pow(2).mean().backward()
        ddp(x).pow(2).mean().backward()
        norms.append({"local": {n: p.grad.norm().item() for n, p in local.named_parameters()},
                      "reduced": {n: getattr(p.grad, "_local_tensor", p.grad).norm().item()
                                  for n, p in model.named_parameters()}})
        optimizer.step()
        optimizer.zero_grad()
except MonitorStop as stop:
    print(f"rank {rank} stopped: {stop}", flush=True)
finally:
    with open(os.path.join(sys.argv[2], f"norms{rank}.json"), "w") as handle:
        json.dump(norms, handle)
    monitor.close()
    dist.destroy_process_group()
