"""The JSON `.vis` file tb-graph-ascend reads (spec §11). Written in batches of nodes (compact: the plugin does
not care about indentation), so the formatted parameter texts of a large graph never exist all at once."""

from __future__ import annotations

import errno
import json
import os
import shutil

import orjson

from msprobe.graph.distributed import COMM_PREFIX
from msprobe.graph.forked import Forked
from msprobe.graph.params import NODE_BATCH, Formatter
from msprobe.graph.tree import Graph
from msprobe.io import atomic_path, new_temporary, remove_temporaries

_BUFFER = 1 << 20       # bytes gathered before a write to the file (a node object is a few kB)


def node_object(node, output_data: str, input_data: str) -> dict:
    """The node's object in the .vis, given the JSON texts of its parameter dicts (Formatter)."""
    body = {"id": node.id, "node_type": node.node_type, "output_data": orjson.Fragment(output_data),
            "input_data": orjson.Fragment(input_data), "upnode": node.upnode or "None", "subnodes": node.subnodes,
            "matched_node_link": node.link, "suggestions": {}, "stack_info": node.stack_info}
    if node.micro_step_id is not None:
        body["micro_step_id"] = node.micro_step_id
    body["data"] = node.data
    return body


def _segments(parts: list) -> list:
    """The document as segments in order: bytes as they are, a Part as it is, or (graph, node name, first, label)
    to format. parts: bytes, Part, or (label, Graph), which stands for `{"root":...,"dump_data_dir":...,"node":{...}`
    (left open)."""
    out: list = []
    dumps = orjson.dumps
    for part in parts:
        if isinstance(part, (bytes, Part)):
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
    closing brace), where matched_distributed is inserted later (add_links). Nodes are formatted in batches."""
    formatter = Formatter(old=True, keep_md5=True)
    ends: list = []
    batch: list = []
    for segment in segments:
        if isinstance(segment, bytes):
            _write_nodes(handle, batch, formatter, ends)
            handle.write(segment)
        else:
            batch.append(segment)
            if len(batch) == NODE_BATCH:
                _write_nodes(handle, batch, formatter, ends)
    _write_nodes(handle, batch, formatter, ends)
    return ends


def _write_nodes(handle, batch: list, formatter: Formatter, ends: list) -> None:
    """Write the node segments of batch, and empty it."""
    if not batch:
        return
    dumps = orjson.dumps
    graph = batch[0][0]            # a batch holds the nodes of one graph (a graph's nodes are not interrupted)
    nodes = [graph.nodes[name] for _, name, _, _ in batch]
    texts = formatter.nodes(nodes, graph.cells)
    for (_, name, first, label), node, (input_data, output_data) in zip(batch, nodes, texts):
        handle.write((b"" if first else b",") + dumps(name) + b":"
                     + dumps(node_object(node, output_data, input_data)))
        if name.startswith(COMM_PREFIX):
            ends.append([label, name, handle.tell() - 1])
    batch.clear()


def _split(segments: list) -> int:
    """Where half of the formatting work is done. The work of a parameter is its number of values, each compare
    cell of a compared one counting half as much again (a weight measured on the 20k benchmark pair: with it the
    two halves of the NPU graph end within a few hundredths of a second of each other)."""
    weights = []
    for segment in segments:
        if isinstance(segment, (bytes, Part)):
            weights.append(0)
            continue
        graph = segment[0]
        node = graph.nodes[segment[1]]
        weight = 1
        for params in (node.input_data, node.output_data):
            for key, item in params.items():
                weight += len(item)
                if node.rows and key in node.rows:
                    weight += len(graph.cells) * 3 // 2
        weights.append(weight)
    half, total = sum(weights) / 2, 0
    for index, weight in enumerate(weights):
        total += weight
        if total >= half:
            return index + 1
    return len(segments)


class Part:
    """Node objects of some segments, formatted into a temporary side file beside the output by a child process
    (in this process, at once, without fork) while this process goes on; appended to the document later. Nothing
    happens until start(): a caller keeps the Part first, so that close() can always clean up after it."""

    def __init__(self, segments: list, path: str, fork: bool):
        self.segments, self.target, self.fork = segments, path, fork
        self.made: list = []
        self.forked = None

    def start(self) -> Part:
        side = new_temporary(self.target, self.made, "part-")
        self.forked = Forked(_write_part, self.segments, side, inline=not self.fork)
        self.segments = None
        return self

    def append_to(self, handle) -> list:
        """Copy the formatted objects to the end of handle; their communication nodes' ends, in handle's offsets."""
        base = handle.tell()
        ends = [[label, name, base + end] for label, name, end in self.forked.result()]
        _append_file(handle, self.made[0])
        self.close()
        return ends

    def close(self) -> None:
        """Stop the child if it runs and remove the side file (safe at any point, and twice)."""
        if self.forked is not None:
            self.forked.cancel()
        remove_temporaries(self.made)


def _append_file(handle, path: str) -> None:
    """Append the file at path to the open binary handle (in the kernel where it can)."""
    with open(path, "rb") as source:
        offset = 0
        if hasattr(os, "sendfile"):
            handle.flush()
            size = os.fstat(source.fileno()).st_size
            try:
                while offset < size:
                    sent = os.sendfile(handle.fileno(), source.fileno(), offset, size - offset)
                    if not sent:
                        raise OSError(f"{path} is shorter than when it was written")
                    offset += sent
            except OSError as exc:
                if offset or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
            finally:
                handle.seek(0, os.SEEK_END)
            if offset == size:
                return
        shutil.copyfileobj(source, handle, 1 << 22)


def graph_part(label: str, graph: Graph, path: str, fork: bool = True) -> Part:
    """A Part that formats a graph (`{"root":...,"node":{...}`, left open) for the .vis at path, not started; pass
    it to write_compare in the graph's place."""
    return Part(_segments([(label, graph)]), path, fork)


def _write_document(path: str, parts: list, fork: bool = True) -> list:
    """Write the parts into path, atomically; returns the communication nodes' ends (see _write_segments). With
    fork (and where the system can), a child process formats the second half of the nodes into a side file (it
    inherits the graphs, nothing is copied) while this process formats the first half. A Part among the parts
    has been started before."""
    segments = _segments(parts)
    split = _split(segments)
    rest = segments[split:]
    cut = next((index for index, segment in enumerate(rest) if isinstance(segment, Part)), len(rest))
    pieces = segments[:split]
    started = [segment for segment in segments if isinstance(segment, Part)]
    try:
        if rest[:cut]:
            started.append(Part(rest[:cut], path, fork))
            started[-1].start()
            pieces.append(started[-1])
        pieces += rest[cut:]
        with atomic_path(path) as temporary, open(temporary, "wb", buffering=_BUFFER) as handle:
            ends: list = []
            run: list = []
            for piece in pieces + [None]:
                if isinstance(piece, Part) or piece is None:
                    ends += _write_segments(handle, run)
                    run = []
                    if piece is not None:
                        ends += piece.append_to(handle)
                else:
                    run.append(piece)
    finally:
        for part in started:
            part.close()
    return ends


def _write_part(segments: list, path: str) -> list:
    with open(path, "wb", buffering=_BUFFER) as part:
        return _write_segments(part, segments)


def write_build(graph: Graph, path: str, overflow_check: bool, fork: bool = True) -> list:
    return _write_document(path, [("NPU", graph), b',"MicroSteps":' + orjson.dumps(graph.micro_steps)
                                  + b',"OverflowCheck":' + orjson.dumps(overflow_check) + b"}"], fork)


def write_compare(npu: Graph, bench: Graph, path: str, task: str, tooltip: dict, colors: dict,
                  overflow_check: bool, fork: bool = True, bench_part: Part | None = None) -> list:
    """bench_part: the Bench graph's objects, started before (graph_part)."""
    tail = {"ToolTip": json.dumps(tooltip, ensure_ascii=False), "Colors": colors,
            "MicroSteps": max(npu.micro_steps, bench.micro_steps), "task": task, "OverflowCheck": overflow_check}
    return _write_document(path, [b'{"NPU":', ("NPU", npu), b'},"Bench":', bench_part or ("Bench", bench),
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
