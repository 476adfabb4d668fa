"""torch.distributed collectives under the collector: 2 gloo processes on loopback, entries as the reference."""

from __future__ import annotations

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")
dist = pytest.importorskip("torch.distributed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world: int, port: int, dump_path: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(task="statistics", level="L1", dump_path=dump_path)
    debugger.start()
    tensor = torch.full((4,), float(rank + 1))
    dist.all_reduce(tensor)
    gathered = [torch.zeros(4) for _ in range(world)]
    dist.all_gather(gathered, tensor * (rank + 1))
    dist.broadcast(tensor, src=0)
    debugger.stop()
    debugger.step()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
@pytest.mark.slow
def test_collectives_are_dumped_per_rank(tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    for rank in (0, 1):
        data = json.loads((tmp_path / "step0" / f"rank{rank}" / "dump.json").read_text())["data"]
        reduce = data["Distributed.all_reduce.0.forward"]
        # in-place collectives: the output is the argument after the call
        assert reduce["input_args"][0]["Max"] == float(rank + 1)
        assert reduce["output"][0]["Max"] == 3.0
        gather = data["Distributed.all_gather.0.forward"]
        assert [t["Max"] for t in gather["output"][0]] == [3.0, 6.0]
        broadcast = data["Distributed.broadcast.0.forward"]
        assert broadcast["input_kwargs"] == {"src": {"type": "int", "value": 0}}
        assert broadcast["output"][1] == {"type": "int", "value": 0}   # kwarg values follow the arguments
