"""Cross-rank links of communication nodes (spec §10): pairing rules on hand-made nodes, and the links on the
real 4-rank dump (broadcast from rank 0, all_reduce and all_gather on the default group)."""

from __future__ import annotations

import orjson

from msprobe.dump.reader import read_dump
from msprobe.graph.distributed import CommNode, comm_nodes, match
from msprobe.graph.tree import build_graph

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
    ranks = {r: comm_nodes(build_graph(read_dump(str(target / f"rank{r}" / "dump.json"), "t", with_stack=True,
                                                 with_construct=True)), False) for r in range(4)}
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
