"""The JSON `.vis` file tb-graph-ascend reads (spec §11): `{"root":...,"dump_data_dir":...,"node":{...},...}` for a
build, `{"NPU":{...},"Bench":{...},"ToolTip":...,...}` for a compare. Written in batches of nodes (compact: the
plugin does not care about indentation), so the formatted parameter texts of a large graph never exist all at
once."""

from __future__ import annotations

import json
import shutil

import orjson

from msprobe.graph.texts import NODE_BATCH, Formatter
from msprobe.graph.tree import COMM_PREFIX, Graph
from msprobe.io import atomic_path

_BUFFER = 1 << 20       # bytes gathered before a write to the file (a node object is a few kB)


def write_build(graph: Graph, path: str, overflow_check: bool) -> list:
    """Write the .vis of a build; returns the ends of its communication nodes (see _write_graph)."""
    tail = b',"MicroSteps":' + orjson.dumps(graph.micro_steps) + b',"OverflowCheck":' + orjson.dumps(overflow_check)
    with atomic_path(path) as temporary, open(temporary, "wb", buffering=_BUFFER) as handle:
        ends = _write_graph(handle, "NPU", graph)
        handle.write(tail + b"}")
    return ends


def write_compare(npu: Graph, bench: Graph, path: str, task: str, tooltip: dict, colors: dict,
                  overflow_check: bool) -> list:
    """Write the .vis of a compare; returns the ends of its communication nodes (see _write_graph)."""
    tail = {"ToolTip": json.dumps(tooltip, ensure_ascii=False), "Colors": colors,
            "MicroSteps": max(npu.micro_steps, bench.micro_steps), "task": task, "OverflowCheck": overflow_check}
    with atomic_path(path) as temporary, open(temporary, "wb", buffering=_BUFFER) as handle:
        handle.write(b'{"NPU":')
        ends = _write_graph(handle, "NPU", npu)
        handle.write(b'},"Bench":')
        ends += _write_graph(handle, "Bench", bench)
        handle.write(b"}," + orjson.dumps(tail)[1:])
    return ends


def _write_graph(handle, label: str, graph: Graph) -> list:
    """Write `{"root":...,"dump_data_dir":...,"node":{...}` (left open); returns [label, node name, offset] of the
    end of every communication node's object (before its closing brace), where matched_distributed is inserted
    later (add_links)."""
    dumps = orjson.dumps
    handle.write(b'{"root":' + dumps(graph.root) + b',"dump_data_dir":' + dumps(graph.dump_data_dir) + b',"node":{')
    formatter = Formatter("json", keep_md5=True)
    ends: list = []
    names = list(graph.nodes)
    for start in range(0, len(names), NODE_BATCH):
        batch = names[start:start + NODE_BATCH]
        nodes = [graph.nodes[name] for name in batch]
        texts = formatter.nodes(nodes, graph.cells)
        if not any(name.startswith(COMM_PREFIX) for name in batch):      # the batch as one object, its braces cut
            body = dumps({name: node_object(node, output_data, input_data)
                          for name, node, (input_data, output_data) in zip(batch, nodes, texts)})
            handle.write((b"," if start else b"") + body[1:-1])
            continue
        for index, (name, node, (input_data, output_data)) in enumerate(zip(batch, nodes, texts), start):
            handle.write((b"," if index else b"") + dumps(name) + b":" + dumps(node_object(node, output_data,
                                                                                           input_data)))
            if name.startswith(COMM_PREFIX):
                ends.append([label, name, handle.tell() - 1])
    handle.write(b"}")
    return ends


def node_object(node, output_data: str, input_data: str) -> dict:
    """The node's object in the .vis, given the JSON texts of its parameter dicts (Formatter)."""
    body = {"id": node.id, "node_type": node.node_type, "output_data": orjson.Fragment(output_data),
            "input_data": orjson.Fragment(input_data), "upnode": node.upnode or "None", "subnodes": node.subnodes,
            "matched_node_link": node.link, "suggestions": {}, "stack_info": node.stack_info}
    if node.micro_step_id is not None:
        body["micro_step_id"] = node.micro_step_id
    body["data"] = node.data
    return body


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
