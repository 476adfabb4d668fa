"""Links between the communication nodes of the ranks of one step (spec §10): `matched_distributed`.

Each rank's graph job extracts a small CommNode per `Distributed.*` forward node (comm_nodes); the driver, which
sees every rank of a step, pairs them (match) and the links are written into the rank's graph afterwards.

Departures from the letter of the spec, for what it leaves open: a call without a `group` argument uses the
default group, all ranks of the step; the root of broadcast/reduce may be given as the keyword `src`/`dst` as well
as positionally."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from msprobe.graph import vis_db, vis_json
from msprobe.graph.tree import COMM_PREFIX, Graph

SEND, RECEIVE, BOTH = "send", "receive", "send_receive"
P2P = {"send": SEND, "isend": SEND, "recv": RECEIVE, "irecv": RECEIVE}
P2P_PEER = {SEND: ("dst",), RECEIVE: ("src",)}
ROOTED = {"broadcast": (SEND, ("1", "src")), "scatter": (SEND, ("src",)), "gather": (RECEIVE, ("dst",)),
          "reduce": (RECEIVE, ("1", "dst"))}
_STATS = ("dtype", "shape", "Max", "Min", "Mean", "Norm")


@dataclass(frozen=True)
class CommNode:
    """What the matching needs of one communication node; small, so worker processes return it."""

    name: str
    api: str
    peer: int | None          # p2p: the other rank; rooted collectives: the root rank
    group: tuple | None       # ranks of the process group; None: the default group
    group_id: str | None
    output: tuple             # dtype, shape, Max, Min, Mean, Norm of output.0
    score: str                # precision_index (or overflow_level with -oc) as text, or "Nan"


def comm_nodes(graph: Graph, overflow_check: bool) -> list:
    """The CommNodes of a graph's `Distributed.<api>.<n>.forward` nodes, in graph order."""
    out = []
    for name, node in graph.nodes.items():
        if not name.startswith(COMM_PREFIX) or not name.endswith(".forward"):
            continue
        api = name.split(".")[1]
        inputs = {key.rsplit(".input.", 1)[-1]: item for key, item in node.input_data.items()}
        peer_fields = P2P_PEER.get(P2P.get(api), ()) or ROOTED.get(api, (None, ()))[1]
        peer = next((rank for f in peer_fields if f in inputs and (rank := _rank(inputs[f])) is not None), None)
        group = group_id = None
        for item in inputs.values():
            if item.get("type") == "torch.ProcessGroup":
                group, group_id = _ranks(item.get("group_ranks")), item.get("group_id")
                group_id = None if group_id is None else str(group_id)
                break
        output = next((item for key, item in node.output_data.items() if key.endswith(".output.0")), {})
        value = node.data.get("overflow_level" if overflow_check else "precision_index")
        out.append(CommNode(name, api, peer, group, group_id, tuple(_plain(output.get(s)) for s in _STATS),
                            "Nan" if value is None else str(value)))
    return out


def _rank(item: dict):
    value = item.get("value")
    return value if type(value) is int else None


def _ranks(value) -> tuple | None:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(type(v) is int for v in value):
        return tuple(value)
    return None


def _plain(value):
    return tuple(value) if isinstance(value, list) else value


def match(ranks: dict) -> dict:
    """ranks: rank -> [CommNode] of one side of one step. Returns rank -> {node name: matched_distributed}."""
    links: dict = {rank: {} for rank in ranks}
    _match_p2p(ranks, links)
    _match_collectives(ranks, links)
    return {rank: found for rank, found in links.items() if found}


def _info(kind: str, peers: list) -> dict:
    return {"communications_type": kind, "nodes_info": {str(rank): [node.score, node.name] for rank, node in peers}}


def _match_p2p(ranks: dict, links: dict) -> None:
    queues: dict = {}     # (kind, from rank, to rank) -> nodes in call order
    for rank, nodes in ranks.items():
        for node in nodes:
            kind = P2P.get(node.api)
            if kind is not None and node.peer is not None:
                sender, receiver = (rank, node.peer) if kind == SEND else (node.peer, rank)
                queues.setdefault((kind, sender, receiver), []).append(node)
    for (kind, sender, receiver), sends in queues.items():
        if kind != SEND:
            continue
        for send, receive in zip(sends, queues.get((RECEIVE, sender, receiver), [])):
            if send.output != receive.output:
                continue
            links[sender][send.name] = _info(SEND, [(receiver, receive)])
            links[receiver][receive.name] = _info(RECEIVE, [(sender, send)])


def _match_collectives(ranks: dict, links: dict) -> None:
    calls: dict = {}      # (group id, api, occurrence) -> {rank: node}
    for rank, nodes in ranks.items():
        seen: dict = {}
        for node in nodes:
            if node.api in P2P:
                continue
            key = (node.group_id, node.api)
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            calls.setdefault((*key, occurrence), {})[rank] = node
    for (_, api, _), members in calls.items():
        if len(members) < 2:
            continue
        first = next(iter(members.values()))
        group = first.group
        if group is not None:
            members = {rank: node for rank, node in members.items() if rank in group}
        rooted = ROOTED.get(api)
        if rooted is not None:
            kind, _ = rooted
            root = first.peer
            if root in members and all(node.peer == root for node in members.values()):
                peers = [(rank, node) for rank, node in members.items() if rank != root]
                if peers:
                    links[root][members[root].name] = _info(kind, peers)
            continue
        for rank, node in members.items():
            peers = [(other, peer) for other, peer in members.items() if other != rank]
            if peers:
                links[rank][node.name] = _info(BOTH, peers)


def link_results(results: list, db: bool) -> tuple[int, list]:
    """Match the communication nodes across the ranks of each step (per side) and write the links: into each
    rank's .vis file, or into its .vis.db rows. Returns (nodes linked, results whose .vis changed)."""
    by_step: dict = {}
    for result in results:
        by_step.setdefault(result.step, []).append(result)
    count, changed = 0, []
    for step_results in by_step.values():
        if len(step_results) < 2:
            continue
        links: dict = {}         # rank -> {(side, node name): matched_distributed}
        for side in ("NPU", "Bench"):
            ranks = {r.rank: r.comm[side] for r in step_results if side in r.comm}
            for rank, found in match(ranks).items():
                links.setdefault(rank, {}).update({(side, name): value for name, value in found.items()})
        for result in step_results:
            found = links.get(result.rank)
            if not found:
                continue
            count += len(found)
            if db:
                result.rows = (vis_db.add_links(result.rows[0], found), result.rows[1])
            elif not result.linked:
                vis_json.add_links(result.output, result.comm_ends, found)
                result.linked = True
                changed.append(result)
    return count, changed
