"""The scale-out executor on the local backend: resume, retries, lost workers, failures by rank, the marker codec and
the message without Ray. The Ray backend has its own module (test_ray.py)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from dying_workers import always_die, compare_or_die_once, refuse, storage_hiccup_once
from scale_data import make_ranks, result_files

from msprobe.compare.batch import run_batch
from msprobe.compare.pipeline import CompareOptions, CompareSummary
from msprobe.dump.locate import locate
from msprobe.scale.resume import decode, encode
from msprobe.scale.task import Backend, JobFailure

from conftest import run_cli


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> tuple[Path, Path]:
    return make_ranks(tmp_path_factory.mktemp("ranks"), 6)


def _compare(target, golden, out, *extra) -> int:
    return run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "--csv", "-j", "2", *extra])


def test_rerun_skips_complete_ranks_and_recomputes_changed_or_missing_ones(ranks, tmp_path, capsys):
    target, golden = ranks
    out = tmp_path / "out"
    assert _compare(target, golden, out) == 0
    first = result_files(out)
    names = sorted(p.name for p in out.glob("compare_result_rank*.csv"))
    assert len(names) == 6
    capsys.readouterr()
    # one result file lost, one input rewritten: those two ranks run again, with the first run's timestamp
    (out / names[0]).unlink()
    changed = golden / "rank4" / "dump.json"
    changed.write_bytes(changed.read_bytes())
    os.utime(changed, ns=(1, 1))
    assert _compare(target, golden, out) == 0
    log = capsys.readouterr().out
    assert "4 of 6 tasks were completed by an earlier run" in log
    assert "Ranks: 6 of 6 complete (4 from an earlier run, 0 after a retry)" in log
    assert sorted(p.name for p in out.glob("compare_result_rank*.csv")) == names     # same names: same stamp
    assert result_files(out) == first
    assert log.count("rows (") == 6      # every rank's summary line, the resumed ones from their markers
    # other settings (xlsx instead of csv) are another run: nothing is skipped
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", out, "-j", "2"]) == 0
    assert "earlier run" not in capsys.readouterr().out.split("Ranks:")[0]


def test_lost_worker_process_is_retried_and_completes(ranks, tmp_path):
    target, golden = ranks
    options = CompareOptions(output_dir=str(tmp_path / "out"), output_format="csv", compare_only=True)
    os.makedirs(options.output_dir)
    jobs = locate(str(target), str(golden)).jobs
    batch, _ = run_batch(jobs, options, Backend("local", workers=2), compare_or_die_once)
    victim = next(i for i, job in enumerate(jobs) if job.suffix == "_rank3")
    assert batch.retried == {victim}
    assert all(isinstance(r, CompareSummary) for r in batch.results)
    assert (tmp_path / "out" / ".killed_rank3").exists()
    reference = tmp_path / "reference"
    assert _compare(target, golden, reference, "-c") == 0
    assert result_files(tmp_path / "out") == result_files(reference)


def test_a_worker_that_always_dies_is_reported_after_its_retries(ranks, tmp_path, caplog):
    target, golden = ranks
    jobs = locate(str(target), str(golden)).jobs[:2]
    options = CompareOptions(output_dir=str(tmp_path), output_format="csv")
    batch, _ = run_batch(jobs, options, Backend("local", workers=2, retries=1), always_die)
    assert [type(r) for r in batch.results] == [JobFailure, JobFailure]
    assert batch.results[0].message == "worker process lost (killed by SIGKILL) (2 attempts)."
    assert batch.results[0].label == jobs[0].label


@pytest.mark.parametrize("workers", [1, 2])
def test_transient_errors_are_retried_and_input_errors_are_not(ranks, tmp_path, workers):
    target, golden = ranks
    jobs = locate(str(target), str(golden)).jobs[:2]
    options = CompareOptions(output_dir=str(tmp_path / "a"), output_format="csv", compare_only=True)
    os.makedirs(options.output_dir)
    batch, _ = run_batch(jobs, options, Backend("local", workers=workers, retries=2), storage_hiccup_once)
    assert all(isinstance(r, CompareSummary) for r in batch.results) and batch.retried == {0, 1}
    options = replace(options, output_dir=str(tmp_path / "b"))
    os.makedirs(options.output_dir)
    batch, _ = run_batch(jobs, options, Backend("local", workers=workers, retries=2), refuse)
    assert [r.message for r in batch.results] == [f"{job.target} is not a dump" for job in jobs]
    assert not batch.retried and (tmp_path / "b" / f".refused{jobs[0].suffix}").read_text() == "1"


def test_bad_rank_is_reported_at_once_and_the_others_complete(ranks, tmp_path, capsys):
    """Invalid JSON cannot pass on a second attempt: no retry, whatever --retries says."""
    target, golden = ranks
    broken = tmp_path / "target"
    shutil.copytree(target, broken)
    (broken / "rank2" / "dump.json").write_text("{not json")
    assert _compare(broken, golden, tmp_path / "out", "--retries", "2") == 0
    captured = capsys.readouterr()
    assert "retrying" not in captured.out and "attempts)" not in captured.out
    assert "Ranks: 5 of 6 complete (0 from an earlier run, 0 after a retry); 1 failed: rank2: " in captured.out
    assert "is not valid JSON" in captured.out
    assert len(list((tmp_path / "out").glob("compare_result_rank*.csv"))) == 5
    # the failed rank has no marker: a re-run tries it again and skips the other five
    assert _compare(broken, golden, tmp_path / "out", "--retries", "0") == 0
    assert "5 of 6 tasks were completed by an earlier run" in capsys.readouterr().out


def test_graph_and_diff_analyze_resume_too(ranks, tmp_path, capsys):
    target, golden = ranks
    for args in (["graph", "-tp", target, "-gp", golden, "-o", tmp_path / "g", "-j", "2"],
                 ["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "d", "-da", "-j", "2"]):
        assert run_cli(args) == 0
        capsys.readouterr()
        assert run_cli(args) == 0
        log = capsys.readouterr().out
        assert "6 of 6 tasks were completed by an earlier run" in log, args[0]
    assert len(list((tmp_path / "g").glob("compare_rank*.vis"))) == 6
    assert "rank" in log and "first" in log.lower()     # -da still reports the origin from the resumed digests


def test_ray_backend_without_ray_says_how_to_install(ranks, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)      # import ray fails as when it is not installed
    target, golden = ranks
    for command in (["compare", "-tp", target, "-gp", golden], ["graph", "-tp", target],
                    ["multi_acc_check", "-api_info", target / "rank0" / "dump.json", "-d", "0", "1"]):
        assert run_cli([*command, "-o", tmp_path / "o", "--backend", "ray"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and 'pip install "msprobe-toolkit[ray]"' in err, err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").glob("*.*"))


def test_marker_codec_keeps_summaries_and_refuses_other_classes():
    from msprobe.compare.advisor import Advice
    from msprobe.compare.diff_analyze import EntryDigest, RankDigest

    summary = CompareSummary("[rank1] ", "statistics", 10, 9, {"pass": 9, "error": 1}, "x.0.forward", 3,
                             "/o/r.csv", advice=Advice(3, "x", "text"))
    node = EntryDigest("Distributed.all_reduce.0.forward", 4, 1, True, True, False, True, 0.7, "[0, 1]",
                {"output": [(1, 2.5)]}, ["File a.py, line 1"])
    digest = RankDigest("[rank1] ", 1, node, None, "/o/r.json", 12)
    for value in (summary, digest, {1: (2, 3), "__x": None}, [float("inf")]):
        assert decode(json.loads(json.dumps(encode(value)))) == value
    forged = {"__dataclass__": "subprocess:Popen", "fields": {}}
    with pytest.raises(ValueError):
        decode(forged)
    with pytest.raises(TypeError):
        encode({1, 2})


def test_rank_options_are_shared_between_processes():
    from msprobe.scale.executor import _share_cores

    options = CompareOptions(jobs=8)
    assert _share_cores(options, 4, "local").jobs == 2
    assert _share_cores(options, 1, "local") is options
    assert _share_cores(options, 4, "ray").jobs == 1
    assert _share_cores(replace(options, jobs=1), 4, "local").jobs == 1
