"""The .vis writer's parts: a graph formatted ahead by a child (graph_part) gives the same file as formatting it
in place, and a part that fails or is abandoned leaves no process and no temporary file behind."""

from __future__ import annotations

import os

import pytest

from msprobe.dump.reader import read_dump
from msprobe.graph import vis_json
from msprobe.graph.match import match_exact
from msprobe.graph.tree import build_graph

from conftest import FIXTURES

STATS = FIXTURES / "stats_mix_step0"


@pytest.fixture(scope="module")
def graphs():
    def tree(side):
        return build_graph(read_dump(str(STATS / side / "dump.json"), side, with_stack=True, with_construct=True))

    npu, bench = tree("target"), tree("golden")
    match_exact(npu, bench)
    return npu, bench


def _write(path, npu, bench, fork, bench_part=None):
    return vis_json.write_compare(npu, bench, str(path), "summary", {"a": "b"}, {}, False, fork, bench_part)


@pytest.mark.parametrize("fork", [True, False])
def test_part_gives_the_same_file(tmp_path, graphs, fork):
    npu, bench = graphs
    plain_ends = _write(tmp_path / "plain.vis", npu, bench, fork)
    part = vis_json.graph_part("Bench", bench, str(tmp_path / "part.vis"), fork).start()
    part_ends = _write(tmp_path / "part.vis", npu, bench, fork, part)
    assert (tmp_path / "plain.vis").read_bytes() == (tmp_path / "part.vis").read_bytes()
    assert plain_ends == part_ends
    assert sorted(os.listdir(tmp_path)) == ["part.vis", "plain.vis"]      # side files removed


def test_abandoned_part_leaves_nothing(tmp_path, graphs):
    _, bench = graphs
    part = vis_json.graph_part("Bench", bench, str(tmp_path / "x.vis"), True).start()
    assert any(name.startswith(".tmp-") for name in os.listdir(tmp_path))
    part.close()
    part.close()                          # twice is harmless
    assert os.listdir(tmp_path) == []


def test_failing_part_raises_and_leaves_nothing(tmp_path, graphs, monkeypatch):
    npu, bench = graphs

    def broken(segments, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(vis_json, "_write_part", broken)
    part = vis_json.graph_part("Bench", bench, str(tmp_path / "x.vis"), True).start()
    with pytest.raises(OSError, match="No space left"):
        _write(tmp_path / "x.vis", npu, bench, True, part)
    assert os.listdir(tmp_path) == []


def test_unstarted_part_makes_nothing(tmp_path, graphs):
    _, bench = graphs
    part = vis_json.graph_part("Bench", bench, str(tmp_path / "x.vis"), True)
    assert os.listdir(tmp_path) == []
    part.close()
    assert os.listdir(tmp_path) == []
