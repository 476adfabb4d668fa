"""The JSON `.vis` file tb-graph-ascend reads (spec §11). Written node by node (orjson, compact: the plugin does
not care about indentation), so the formatted parameter texts of a large graph never exist all at once."""

from __future__ import annotations

import json
import os
import shutil

import orjson

from msprobe.graph.distributed import COMM_PREFIX
from msprobe.graph.forked import Forked
from msprobe.graph.params import format_params, new_caches
from msprobe.graph.tree import Graph
from msprobe.report.atomic import atomic_path

_PLAIN_FIELDS = 10     # fields of a tensor parameter before compare cells are attached


def node_object(node, keep_md5: bool = True, caches: tuple | None = None) -> dict:
    caches = caches if caches is not None else new_caches()
    body = {"id": node.id, "node_type": node.node_type,
            "output_data": format_params(node.output_data, True, keep_md5, caches),
            "input_data": format_params(node.input_data, True, keep_md5, caches),
            "upnode": node.upnode or "None", "subnodes": node.subnodes, "matched_node_link": node.link,
            "suggestions": {}, "stack_info": node.stack_info}
    if node.micro_step_id is not None:
        body["micro_step_id"] = node.micro_step_id
    body["data"] = node.data
    return body


def _segments(parts: list) -> list:
    """The document as segments in order: bytes as they are, or (graph, node name, first, label) to format. parts:
    bytes, or (label, Graph), which stands for `{"root":...,"dump_data_dir":...,"node":{...}` (left open)."""
    out: list = []
    dumps = orjson.dumps
    for part in parts:
        if isinstance(part, bytes):
            out.append(part)
            continue
        label, graph = part
        out.append(b'{"root":' + dumps(graph.root) + b',"dump_data_dir":' + dumps(graph.dump_data_dir)
                   + b',"node":{')
        out.extend((graph, name, index == 0, label) for index, name in enumerate(graph.nodes))
        out.append(b"}")
    return out


def _write_segments(handle, segments) -> list:
    """Write; returns [label, node name, offset] of the end of every communication node's object (before its
    closing brace), where matched_distributed is inserted later (add_links)."""
    dumps = orjson.dumps
    caches = new_caches()
    ends = []
    for segment in segments:
        if isinstance(segment, bytes):
            handle.write(segment)
            continue
        graph, name, first, label = segment
        handle.write((b"" if first else b",") + dumps(name) + b":"
                     + dumps(node_object(graph.nodes[name], caches=caches)))
        if name.startswith(COMM_PREFIX):
            ends.append([label, name, handle.tell() - 1])
    return ends


def _split(segments: list) -> int:
    """Where half of the formatting work is done. The work of a parameter is its number of values, and three
    times that for the compare cells attached to it (mostly unique texts, spelled one by one)."""
    weights = []
    for segment in segments:
        if isinstance(segment, bytes):
            weights.append(0)
            continue
        node = segment[0].nodes[segment[1]]
        weight = 1
        for params in (node.input_data, node.output_data):
            for item in params.values():
                size = len(item)
                weight += size + 2 * max(size - _PLAIN_FIELDS, 0)
        weights.append(weight)
    half, total = sum(weights) / 2, 0
    for index, weight in enumerate(weights):
        total += weight
        if total >= half:
            return index + 1
    return len(segments)


def _write_document(path: str, parts: list, fork: bool = True) -> list:
    """Write the parts into path, atomically; returns the communication nodes' ends (see _write_segments). With
    fork (and where the system can), a child process formats the second half of the nodes into a side file (it
    inherits the graphs, nothing is copied) while this process formats the first half."""
    segments = _segments(parts)
    split = _split(segments)
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        side = temporary + ".part"
        second = Forked(_write_part, segments[split:], side, inline=not fork)
        try:
            ends = _write_segments(handle, segments[:split])
            base = handle.tell()
            ends += [[label, name, base + end] for label, name, end in second.result()]
            with open(side, "rb") as part:
                shutil.copyfileobj(part, handle, 1 << 22)
        finally:
            second.cancel()
            if os.path.exists(side):
                os.unlink(side)
    return ends


def _write_part(segments: list, path: str) -> list:
    with open(path, "wb") as part:
        return _write_segments(part, segments)


def write_build(graph: Graph, path: str, overflow_check: bool, fork: bool = True) -> list:
    return _write_document(path, [("NPU", graph), b',"MicroSteps":' + orjson.dumps(graph.micro_steps)
                                  + b',"OverflowCheck":' + orjson.dumps(overflow_check) + b"}"], fork)


def write_compare(npu: Graph, bench: Graph, path: str, task: str, tooltip: dict, colors: dict,
                  overflow_check: bool, fork: bool = True) -> list:
    tail = {"ToolTip": json.dumps(tooltip, ensure_ascii=False), "Colors": colors,
            "MicroSteps": max(npu.micro_steps, bench.micro_steps), "task": task, "OverflowCheck": overflow_check}
    return _write_document(path, [b'{"NPU":', ("NPU", npu), b'},"Bench":', ("Bench", bench),
                                  b"}," + orjson.dumps(tail)[1:]], fork)


def add_links(path: str, ends: list, links: dict) -> None:
    """Insert `"matched_distributed": {...}` into the node objects of a written .vis (links: (label, node name) ->
    value; ends: what the write returned), streaming the file into a new one that replaces it."""
    inserts = sorted((end, b',"matched_distributed":' + orjson.dumps(links[(label, name)]))
                     for label, name, end in ends if (label, name) in links)
    if not inserts:
        return
    with open(path, "rb") as source, atomic_path(path) as temporary, open(temporary, "wb") as target:
        position = 0
        for offset, text in inserts:
            _copy(source, target, offset - position)
            target.write(text)
            position = offset
        shutil.copyfileobj(source, target, 1 << 22)


def _copy(source, target, size: int) -> None:
    while size > 0:
        chunk = source.read(min(size, 1 << 22))
        if not chunk:
            raise OSError("the graph file is shorter than when it was written")
        target.write(chunk)
        size -= len(chunk)
