"""Directory inputs: step folders of ranks, proc folders, dump roots of steps, graph/pynative halves."""

from __future__ import annotations

import shutil
from pathlib import Path

from msprobe.dump.locate import locate

from conftest import FIXTURES, read_csv, run_cli
from test_conformance import DOCUMENTED_ROWS, differences, reference_view, split_documented


def make_side(root: Path, layout: dict) -> Path:
    """layout: relative folder -> fixture case whose target (or golden) files are copied there."""
    for folder, (case, side) in layout.items():
        shutil.copytree(FIXTURES / case / side, root / folder)
    return root


def test_step_folder_of_ranks_gives_one_table_per_rank(multirank_step0, tmp_path):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "out", "--csv", "-c", "-j", "2"]) == 0
    names = sorted(p.name.rsplit("_", 1)[0] for p in (tmp_path / "out").glob("compare_result_rank*.csv"))
    assert names == [f"compare_result_rank{r}" for r in range(4)]
    ours = read_csv(next((tmp_path / "out").glob("compare_result_rank1_*.csv")))
    reference = read_csv(FIXTURES / "multirank_rank1_step0" / "reference.csv.gz")
    assert reference_view(ours, reference, "multirank_rank1_step0") == reference


def test_rank_on_one_side_only_is_reported_and_the_rest_compared(tmp_path, capsys):
    make_side(tmp_path / "t", {"rank0": ("stats_mix_step0", "target"), "rank1": ("stats_mix_step0", "target")})
    make_side(tmp_path / "g", {"rank0": ("stats_mix_step0", "golden")})
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "out", "--csv"]) == 0
    assert len(list((tmp_path / "out").glob("compare_result_rank0_*.csv"))) == 1
    assert not list((tmp_path / "out").glob("compare_result_rank1_*"))
    assert "rank1 exists only in the target dump" in capsys.readouterr().out


def test_proc_folders_pair_when_single(tmp_path):
    make_side(tmp_path / "t", {"proc111": ("stats_L0_step0", "target")})
    make_side(tmp_path / "g", {"proc222": ("stats_L0_step0", "golden")})
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "out", "--csv"]) == 0
    (result,) = (tmp_path / "out").glob("compare_result_proc111_*.csv")
    # numerically equal: the reference's pandas writes 60 as 60.0 in all-numeric columns (spec §10 item 8)
    reference = read_csv(FIXTURES / "stats_L0_step0" / "reference.csv.gz")
    documented, other = split_documented(differences(reference, read_csv(result)), reference, read_csv(result))
    assert other == [] and documented == DOCUMENTED_ROWS["stats_L0_step0"]


def test_dump_root_of_steps_and_graph_pynative_halves(tmp_path):
    for side in ("target", "golden"):
        make_side(tmp_path / side, {"graph/step0/rank0": ("stats_L0_step0", side),
                                    "pynative/step0/rank0": ("stats_L1_step0", side),
                                    "pynative/step1/rank0": ("stats_L1_step1", side)})
    assert run_cli(["compare", "-tp", tmp_path / "target", "-gp", tmp_path / "golden", "-o", tmp_path / "out",
                    "--csv", "-c"]) == 0
    found = sorted(str(p.parent.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.csv"))
    assert found == ["graph/step0", "pynative/step0", "pynative/step1"]


def test_bad_directories(tmp_path, capsys):
    (tmp_path / "t" / "rank0").mkdir(parents=True)
    (tmp_path / "g" / "rank0").mkdir(parents=True)
    code = run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "out"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no dump.json" in err[0]
    (tmp_path / "empty_t").mkdir()
    (tmp_path / "empty_g").mkdir()
    assert run_cli(["compare", "-tp", tmp_path / "empty_t", "-gp", tmp_path / "empty_g"]) == 1
    assert "nothing to compare" in capsys.readouterr().err


def test_one_broken_rank_does_not_stop_the_others(tmp_path, capsys):
    for side in ("target", "golden"):
        make_side(tmp_path / side, {"rank0": ("stats_L0_step0", side), "rank1": ("stats_L0_step0", side)})
    (tmp_path / "target" / "rank1" / "dump.json").write_text("{ truncated")
    assert run_cli(["compare", "-tp", tmp_path / "target", "-gp", tmp_path / "golden", "-o", tmp_path / "out",
                    "--csv", "-c"]) == 0
    assert len(list((tmp_path / "out").glob("compare_result_rank0_*.csv"))) == 1
    assert not list((tmp_path / "out").glob("*rank1*"))


def test_locate_mixed_file_and_dir_is_a_usage_error(tmp_path):
    make_side(tmp_path / "t", {"rank0": ("stats_L0_step0", "target")})
    code = run_cli(["compare", "-tp", tmp_path / "t", "-gp", FIXTURES / "stats_L0_step0" / "golden" / "dump.json"])
    assert code == 2
    located = locate(str(tmp_path / "t"), str(tmp_path / "t"))
    assert [j.suffix for j in located.jobs] == ["_rank0"]
