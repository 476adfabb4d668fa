"""Pairing the nodes of two graphs (spec §6): exact (name + parent chain; no test of the parameters, which the compare
core pairs by name whatever their count: a call that passes an argument in one run only stays matched, as in the
table), fuzzy (-fm: modules by name, their APIs by name and order) and mapped (-lm: an entry map from the layer
mapping)."""

from __future__ import annotations

import re

from msprobe.graph.tree import API, ROOT, Graph

_CALL_INDEX = re.compile(r"\.\d+\.")
_RANK = re.compile(r"_rank\d+")


def _link(npu_node, bench_node, npu_anc: list, bench_anc: list, same_chain: bool) -> None:
    if same_chain:
        npu_node.link = bench_node.link = npu_anc + [bench_node.id]
    else:
        npu_node.link = bench_anc + [bench_node.id]
        bench_node.link = npu_anc + [npu_node.id]


def match_graphs_exact(npu: Graph, bench: Graph) -> None:
    npu_anc = npu.ancestors()
    bench_nodes = bench.nodes
    chain_ok = {ROOT: ROOT in bench_nodes}
    for name in _bfs(npu):
        node = npu.nodes[name]
        if name != ROOT:
            other = bench_nodes.get(name)
            chain_ok[name] = bool(other is not None and other.upnode == node.upnode and chain_ok.get(node.upnode))
        if chain_ok[name]:
            other = bench_nodes[name]
            _link(node, other, npu_anc[name], None, True)


def _api_key_counts(graph: Graph, parent: str) -> dict:
    counts: dict = {}
    keys = {}
    for child in graph.nodes[parent].subnodes:
        if graph.nodes[child].node_type != API:
            continue
        stripped = _RANK.sub("", _CALL_INDEX.sub(".", child))
        counts[stripped] = counts.get(stripped, 0) + 1
        keys[f"{stripped}{counts[stripped]}"] = child
    return keys


def match_graphs_fuzzy(npu: Graph, bench: Graph) -> None:
    npu_anc, bench_anc = npu.ancestors(), bench.ancestors()
    for name in _bfs(npu):
        node = npu.nodes[name]
        if node.node_type == API:
            continue
        other = bench.nodes.get(name)
        if other is None or name not in bench_anc:
            continue
        _link(node, other, npu_anc[name], bench_anc[name], False)
        bench_apis = _api_key_counts(bench, name)
        for key, api in _api_key_counts(npu, name).items():
            partner = bench_apis.get(key)
            if partner is not None:
                _link(npu.nodes[api], bench.nodes[partner], npu_anc[api], bench_anc[partner], False)


def match_graphs_mapped(npu: Graph, bench: Graph, entry_map: dict) -> None:
    npu_anc, bench_anc = npu.ancestors(), bench.ancestors()
    for name in _bfs(npu):
        partner = entry_map.get(name, name)
        other = bench.nodes.get(partner)
        if other is None or partner not in bench_anc:
            other = bench.nodes.get(name)
            partner = name
        if other is not None and partner in bench_anc:
            _link(npu.nodes[name], other, npu_anc[name], bench_anc[partner], False)


def _bfs(graph: Graph) -> list:
    queue = [ROOT]
    nodes = graph.nodes
    for name in queue:
        queue.extend(nodes[name].subnodes)
    return queue


def counterpart(node) -> str | None:
    return node.link[-1] if node.link else None
