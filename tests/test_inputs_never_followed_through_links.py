"""Inputs are never followed through symbolic links unannounced: a rank or step folder that is a link is named as one."""

from __future__ import annotations

import pytest
from helpers_bad_input import (
    run_inproc,
)


@pytest.mark.usefixtures("fresh_logger")
@pytest.mark.parametrize("where", ["rank1", "step1"])
def test_a_rank_or_step_folder_that_is_a_link_is_named_as_one(tmp_path, capsys, where):
    """A target rank1 linked to rank0 was skipped with 'rank1 exists only in the golden dump', which it does not:
    the warning now says the folder is a symbolic link and is not compared."""
    import shutil

    from helpers_bad_input import STATS_MIX

    for side, source in (("t", "target"), ("g", "golden")):
        for step in ("step0", "step1"):
            for rank in ("rank0", "rank1"):
                linked = f"{step}/{rank}" == "step0/rank1" if where == "rank1" else step == "step1"
                if side == "t" and linked:
                    continue
                shutil.copytree(STATS_MIX / source, tmp_path / side / step / rank)
    link = tmp_path / "t" / ("step0" if where == "rank1" else "") / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("rank0" if where == "rank1" else "step0")
    run = run_inproc(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "out", "--csv"],
                     capsys)
    assert run.code == 0, run.err
    assert "exists only in the golden dump" not in run.out
    assert f"{where} of the target dump is a symbolic link; not compared" in run.out
