"""The Ray backend on a local Ray instance of 2 CPUs (one per module): the results of a synthetic 16-rank dump are
the local backend's, file by file, for compare, graph and multi_acc_check; a killed worker's rank is retried; a bad
rank is reported while the others complete; an interrupted driver's run resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install "msprobe-toolkit[ray]"): Ray backend tests skipped')

from dying_workers import compare_or_die_once  # noqa: E402
from scale_data import make_ranks, result_files  # noqa: E402

pytestmark = pytest.mark.slow       # a local Ray instance per module

from msprobe.compare.batch import run_batch  # noqa: E402
from msprobe.compare.pipeline import CompareOptions, CompareSummary  # noqa: E402
from msprobe.dump.locate import locate  # noqa: E402
from msprobe.scale.task import Backend  # noqa: E402

from conftest import FIXTURES, interrupt_after_markers, run_cli  # noqa: E402

HERE = Path(__file__).resolve().parent
RANKS = 16


def _cli(*args) -> list:
    return [sys.executable, "-m", "msprobe", *[str(a) for a in args]]


def _local(*args) -> None:
    """A run of the local backend, in its own process (forking this one, which holds Ray's threads, is unsafe)."""
    done = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance of 2 CPUs; its workers can import the test helpers (dying_workers.py)."""
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning",
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The 16-rank dump and the local backend's compare results (csv tables and advisor files)."""
    base = tmp_path_factory.mktemp("scale")
    target, golden = make_ranks(base / "dump", RANKS)
    _local("compare", "-tp", target, "-gp", golden, "-o", base / "local", "--csv", "-j", "2")
    return target, golden, base / "local"


def test_compare_on_ray_equals_local_file_by_file(cluster, dataset, tmp_path, capsys):
    target, golden, local = dataset
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--csv", "--backend", "ray"]) == 0
    assert "Ranks: 16 of 16 complete (0 from an earlier run, 0 after a retry)" in capsys.readouterr().out
    ours, reference = result_files(tmp_path), result_files(local)
    assert len(reference) == 2 * RANKS and ours.keys() == reference.keys()
    assert [name for name in reference if ours[name] != reference[name]] == []


def test_graph_on_ray_equals_local(cluster, dataset, tmp_path):
    target, golden, _ = dataset
    _local("graph", "-tp", target, "-gp", golden, "-o", tmp_path / "local", "-j", "2")
    assert run_cli(["graph", "-tp", target, "-gp", golden, "-o", tmp_path / "ray", "--backend", "ray"]) == 0
    ours, reference = result_files(tmp_path / "ray"), result_files(tmp_path / "local")
    assert len(reference) == RANKS and ours == reference


def test_multi_acc_check_on_ray_equals_local(cluster, tmp_path):
    api_info = FIXTURES / "stats_L1_step0" / "target" / "dump.json"
    _local("multi_acc_check", "-api_info", api_info, "-d", "0", "1", "-o", tmp_path / "local")
    assert run_cli(["multi_acc_check", "-api_info", api_info, "-d", "0", "1", "-o", tmp_path / "ray",
                    "--backend", "ray"]) == 0
    ours, reference = result_files(tmp_path / "ray"), result_files(tmp_path / "local")
    assert len(reference) == 7 and ours == reference      # per device: result, details, info; one summary


def test_killed_worker_is_retried_and_its_rank_completed(cluster, dataset, tmp_path, capsys):
    target, golden, local = dataset
    options = CompareOptions(output_dir=str(tmp_path), output_format="csv")
    jobs = locate(str(target), str(golden)).jobs
    batch, _ = run_batch(jobs, options, Backend("ray"), compare_or_die_once)
    victim = next(i for i, job in enumerate(jobs) if job.suffix == "_rank3")
    assert (tmp_path / ".killed_rank3").exists()          # the first attempt did kill its worker
    assert batch.retried == {victim}
    assert "[rank3] attempt 1 of 3 failed, retrying: Ray task failed" in capsys.readouterr().out
    assert all(isinstance(result, CompareSummary) for result in batch.results)
    assert result_files(tmp_path) == result_files(local)


def test_bad_rank_is_reported_at_once_while_the_others_complete(cluster, dataset, tmp_path, capsys):
    """A dump that is not valid fails every attempt the same way: reported without retries."""
    target, golden, local = dataset
    broken = tmp_path / "target"
    shutil.copytree(target, broken, copy_function=os.link)
    (broken / "rank5" / "dump.json").unlink()
    (broken / "rank5" / "dump.json").write_text('{"task": "statistics", "level": "mix", "data": [1]}')
    code = run_cli(["compare", "-tp", broken, "-gp", golden, "-o", tmp_path / "out", "--csv", "--backend", "ray"])
    out = capsys.readouterr().out
    assert code == 0
    assert "[rank5] attempt" not in out and "attempts)" not in out
    assert "15 of 16 complete (0 from an earlier run, 0 after a retry); 1 failed: rank5: " in out
    reference = {name: data for name, data in result_files(local).items() if "rank5" not in name}
    assert result_files(tmp_path / "out") == reference


@pytest.mark.serial
def test_interrupted_driver_resumes_without_redoing_finished_ranks(cluster, dataset, tmp_path, capsys):
    target, golden, local = dataset
    out = tmp_path / "out"
    markers = out / ".msprobe_done" / "compare" / "tasks"

    @ray.remote(num_cpus=1)
    def hold(flag: str) -> None:       # one of the 2 CPUs is busy: the driver's ranks run one at a time
        while not os.path.exists(flag):
            time.sleep(0.02)

    flag = tmp_path / "release"
    holder = hold.remote(str(flag))
    try:
        code, _, err = interrupt_after_markers(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv",
                                                "--backend", "ray", "--ray-address", cluster], markers, 3)
    finally:
        flag.touch()
        ray.get(holder)
    assert code == 130 and "interrupted" in err, err
    finished = {path.name: path.stat().st_mtime_ns for path in out.glob("compare_result_rank*.csv")
                if list(markers.glob(f"rank{path.name.split('_')[2][4:]}.*.json"))}     # rank<N>.<run>.json
    assert 3 <= len(finished) < RANKS
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv", "--backend", "ray"]) == 0
    assert f"{len(finished)} of {RANKS} tasks were completed by an earlier run" in capsys.readouterr().out
    assert {name: (out / name).stat().st_mtime_ns for name in finished} == finished   # not written again
    assert result_files(out) == result_files(local)
    assert len(list(out.glob("compare_result_rank*.csv"))) == RANKS        # one file per rank: the run's stamp


def test_unreachable_cluster_address_fails_at_once_in_one_line(dataset, tmp_path, capsys):
    target, golden, _ = dataset
    code = run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--backend", "ray", "--ray-address",
                    "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "cannot reach the Ray cluster at 127.0.0.1:1" in err
