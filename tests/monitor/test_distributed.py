"""Two ranks under torchrun on gloo with DDP: each rank its own folder; gradients before reduction are each rank's
own, after it DDP's average, the same on both; `action: stop` ends both ranks at the same step boundary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msprobe.monitor.layout import read_anomalies, read_run

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path, config: dict, *extra) -> subprocess.CompletedProcess:
    path = tmp_path / "monitor.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=str(REPO), MONITOR_OUTPUT_DIR=str(tmp_path / "out"), OMP_NUM_THREADS="1")
    env.pop("DYNAMIC_MONITOR", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                           str(HERE / "ddp_train.py"), str(path), str(tmp_path), *map(str, extra)],
                          capture_output=True, text=True, env=env, timeout=240, check=False)


@pytest.mark.slow
def test_ddp_gradients_before_and_after_reduction(tmp_path):
    done = torchrun(tmp_path, {"wg_distribution": True, "xy_distribution": True, "ops": ["norm"], "ndigits": 10})
    assert done.returncode == 0, done.stderr[-3000:]
    runs = read_run(str(tmp_path / "out"))
    assert sorted(runs) == [0, 1]
    steps = {rank: list(records) for rank, records in runs.items()}
    norms = {rank: json.loads((tmp_path / f"norms{rank}.json").read_text()) for rank in (0, 1)}
    for rank in (0, 1):
        assert [r.step for r in steps[rank]] == [0, 1, 2, 3]
        for records, expected in zip(steps[rank], norms[rank]):
            values = {(g, n): v[0] for g, n, v in zip(records.group, records.name, records.values)}
            for name, norm in expected["local"].items():
                assert values[("grad_unreduced", f"module.{name}")] == pytest.approx(norm, rel=1e-6)
            for name, norm in expected["reduced"].items():
                assert values[("grad_reduced", f"module.{name}")] == pytest.approx(norm, rel=1e-6)
    assert norms[0][0]["reduced"] == pytest.approx(norms[1][0]["reduced"], rel=1e-6)
    assert norms[0][0]["local"]["0.weight"] != pytest.approx(norms[1][0]["local"]["0.weight"], rel=1e-3)


@pytest.mark.slow
def test_action_stop_ends_every_rank_at_the_same_step(tmp_path):
    done = torchrun(tmp_path, {"wg_distribution": True, "ops": ["norm", "nans"], "action": "stop",
                               "alert": {"rules": [{"rule_name": "AnomalyNan"}]}}, 2)
    assert "rank 0 stopped: msprobe monitor: training stopped after step 2" in done.stdout
    assert "rank 1 stopped: msprobe monitor: training stopped after step 2" in done.stdout
    for rank in (0, 1):
        # steps 0 to 2 ran their backward; step 2's optimizer step completed, then training stopped
        assert len(json.loads((tmp_path / f"norms{rank}.json").read_text())) == 3
        assert [r.step for r in read_run(str(tmp_path / "out"))[rank]] == [0, 1, 2]
    first = read_anomalies(str(tmp_path / "out"))[0]
    assert first.step == 2 and first.kind == "nan"


@pytest.mark.slow
def test_fsdp2_records_each_ranks_shards(tmp_path):
    done = torchrun(tmp_path, {"wg_distribution": True, "mv_distribution": True, "param_distribution": True,
                               "ur_distribution": True, "ops": ["norm"], "ndigits": 10}, -1, "fsdp2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gradients before reduction are not recorded" in done.stderr
    runs = read_run(str(tmp_path / "out"))
    for rank in (0, 1):
        norms = json.loads((tmp_path / f"norms{rank}.json").read_text())
        steps = list(runs[rank])
        assert [r.step for r in steps] == [0, 1, 2, 3]
        for records, expected in zip(steps, norms):
            assert "grad_unreduced" not in records.group
            values = {(g, n): v[0] for g, n, v in zip(records.group, records.name, records.values)}
            for name, norm in expected["reduced"].items():
                assert values[("grad_reduced", name)] == pytest.approx(norm, rel=1e-6)
            assert {"exp_avg", "exp_avg_sq", "param_origin", "update_ratio"} <= set(records.group)
