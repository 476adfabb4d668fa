"""Cross-rank links of communication nodes (spec §10): pairing rules on hand-made nodes, and the links on the
real 4-rank dump (broadcast from rank 0, all_reduce and all_gather on the default group)."""

from __future__ import annotations

import sqlite3

import orjson

from msprobe.graph.distributed import CommNode, comm_nodes, match
from msprobe.graph.run import read_graph

from conftest import only_file, run_cli

STATS = ("torch.float32", (2, 2), 1.0, 0.0, 0.5, 1.2)


def node(name, peer=None, group=None, group_id=None, output=STATS, score="Nan"):
    return CommNode(name, name.split(".")[1], peer, group, group_id, output, score)


def test_p2p_pairs_in_order_and_needs_equal_outputs():
    ranks = {
        0: [node("Distributed.send.0.forward", peer=1), node("Distributed.send.1.forward", peer=1),
            node("Distributed.isend.0.forward", peer=2)],
        1: [node("Distributed.recv.0.forward", peer=0, score="0.25"),
            node("Distributed.recv.1.forward", peer=0, output=("torch.float32", (2, 2), 9.0, 0.0, 0.5, 1.2))],
        2: [node("Distributed.irecv.0.forward", peer=0)],
    }
    links = match(ranks)
    assert links[0]["Distributed.send.0.forward"] == {
        "communications_type": "send", "nodes_info": {"1": ["0.25", "Distributed.recv.0.forward"]}}
    assert links[1]["Distributed.recv.0.forward"] == {
        "communications_type": "receive", "nodes_info": {"0": ["Nan", "Distributed.send.0.forward"]}}
    # the second pair's data differ: not linked
    assert "Distributed.send.1.forward" not in links[0] and "Distributed.recv.1.forward" not in links[1]
    assert links[2]["Distributed.irecv.0.forward"]["nodes_info"] == {"0": ["Nan", "Distributed.isend.0.forward"]}


def test_collectives_by_group_api_and_occurrence():
    group_a, group_b = (0, 1), (2, 3)
    ranks = {r: [node("Distributed.all_reduce.0.forward", group=group_a if r < 2 else group_b,
                      group_id="a" if r < 2 else "b", score=str(r)),
                 node("Distributed.broadcast.0.forward", peer=1)] for r in range(4)}
    links = match(ranks)
    assert links[0]["Distributed.all_reduce.0.forward"] == {
        "communications_type": "send_receive", "nodes_info": {"1": ["1", "Distributed.all_reduce.0.forward"]}}
    assert links[3]["Distributed.all_reduce.0.forward"]["nodes_info"] == {
        "2": ["2", "Distributed.all_reduce.0.forward"]}
    # only the root of a broadcast initiates, towards every other rank of the (default) group
    assert links[1]["Distributed.broadcast.0.forward"] == {
        "communications_type": "send", "nodes_info": {str(r): ["Nan", "Distributed.broadcast.0.forward"]
                                                      for r in (0, 2, 3)}}
    assert "Distributed.broadcast.0.forward" not in links[0]


def test_single_rank_or_lonely_calls_have_no_links():
    assert match({0: [node("Distributed.all_reduce.0.forward")]}) == {}
    assert match({0: [node("Distributed.send.0.forward", peer=1)], 1: []}) == {}


def test_real_four_rank_dump(multirank_step0):
    target, _ = multirank_step0
    ranks = {r: comm_nodes(read_graph(str(target / f"rank{r}" / "dump.json"), "t")[1], False) for r in range(4)}
    assert [len(ranks[r]) for r in range(4)] == [59, 59, 59, 59]
    links = match(ranks)
    # rank 0 broadcasts 29 times (src=0); every rank takes part in 29 all_reduce and 1 all_gather
    assert len(links[0]) == 59 and [len(links[r]) for r in (1, 2, 3)] == [30, 30, 30]
    assert links[0]["Distributed.broadcast.0.forward"]["nodes_info"] == {
        str(r): ["Nan", "Distributed.broadcast.0.forward"] for r in (1, 2, 3)}
    assert "Distributed.broadcast.0.forward" not in links[2]
    assert orjson.loads(orjson.dumps(links[2]["Distributed.all_gather.0.forward"])) == {
        "communications_type": "send_receive",
        "nodes_info": {str(r): ["Nan", "Distributed.all_gather.0.forward"] for r in (0, 1, 3)}}


def _vis_nodes(path, side=None):
    document = orjson.loads(path.read_bytes())
    return (document[side] if side else document)["node"]


def test_batch_build_and_compare_write_links(tmp_path, multirank_step0):
    target, golden = multirank_step0
    out = tmp_path / "build"
    assert run_cli(["graph", "-tp", target, "-o", out]) == 0
    files = {r: only_file(out, f"build_rank{r}_*.vis") for r in range(4)}
    before = {r: path.stat().st_mtime_ns for r, path in files.items()}
    rank0 = _vis_nodes(files[0])
    assert rank0["Distributed.broadcast.0.forward"]["matched_distributed"] == {
        "communications_type": "send", "nodes_info": {str(r): ["Nan", "Distributed.broadcast.0.forward"]
                                                      for r in (1, 2, 3)}}
    # the key comes last in the node object, and nodes without links have none
    assert list(rank0["Distributed.broadcast.0.forward"])[-1] == "matched_distributed"
    assert "matched_distributed" not in _vis_nodes(files[1])["Distributed.broadcast.0.forward"]
    assert sum("matched_distributed" in n for n in _vis_nodes(files[2]).values()) == 30
    # a second run resumes every rank: files untouched, no link written twice
    assert run_cli(["graph", "-tp", target, "-o", out]) == 0
    assert {r: path.stat().st_mtime_ns for r, path in files.items()} == before
    # compare: the NPU side carries each peer's precision index, the Bench side "Nan"
    out = tmp_path / "compare"
    assert run_cli(["graph", "-tp", target, "-gp", golden, "-o", out]) == 0
    path = only_file(out, "compare_rank1_*.vis")
    npu, bench = _vis_nodes(path, "NPU"), _vis_nodes(path, "Bench")
    peers = npu["Distributed.all_reduce.0.forward"]["matched_distributed"]["nodes_info"]
    assert sorted(peers) == ["0", "2", "3"]
    for rank, (score, name) in peers.items():
        peer = _vis_nodes(only_file(out, f"compare_rank{rank}_*.vis"), "NPU")[name]
        assert score == str(peer["data"]["precision_index"])
    assert {v[0] for v in bench["Distributed.all_reduce.0.forward"]["matched_distributed"]["nodes_info"].values()} \
        == {"Nan"}


def test_batch_db_links(tmp_path, multirank_step0):
    target, _ = multirank_step0
    assert run_cli(["graph", "-tp", target, "-o", tmp_path, "--format", "db"]) == 0
    with sqlite3.connect(only_file(tmp_path, "build_*.vis.db")) as connection:
        rows = dict(((rank, name), value) for rank, name, value in connection.execute(
            "SELECT rank, node_name, matched_distributed FROM tb_nodes WHERE is_distributed = 1"))
    assert orjson.loads(rows[(0, "Distributed.broadcast.3.forward")])["communications_type"] == "send"
    assert rows[(2, "Distributed.broadcast.3.forward")] == "{}"
    assert orjson.loads(rows[(3, "Distributed.all_gather.0.forward")])["nodes_info"]["0"] == [
        "Nan", "Distributed.all_gather.0.forward"]


def test_vis_written_in_batches_of_any_size_is_the_same_file(tmp_path, multirank_step0, monkeypatch):
    """A batch of nodes is dumped as one object unless it holds a communication node (whose end the links need):
    small batches, which mix both kinds, give the bytes of one batch for the whole graph, links included."""
    from msprobe.graph import vis_json

    target, _ = multirank_step0
    written = {}
    for batch in (1_000_000, 7):
        monkeypatch.setattr(vis_json, "NODE_BATCH", batch)
        out = tmp_path / f"batch{batch}"
        assert run_cli(["graph", "-tp", target, "-o", out, "-j", "1"]) == 0
        written[batch] = {r: only_file(out, f"build_rank{r}_*.vis").read_bytes() for r in range(4)}
    assert written[7] == written[1_000_000]
    nodes = orjson.loads(written[7][0])["node"]
    assert "matched_distributed" in nodes["Distributed.broadcast.0.forward"] and len(nodes) > 7
