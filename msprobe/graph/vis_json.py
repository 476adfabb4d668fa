"""The JSON `.vis` file tb-graph-ascend reads (spec §11). Written node by node (orjson, compact: the plugin does
not care about indentation), so the formatted parameter texts of a large graph never exist all at once."""

from __future__ import annotations

import json
import os
import shutil

import orjson

from msprobe.graph.params import format_params, new_caches
from msprobe.graph.tree import Graph
from msprobe.report.atomic import atomic_path


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


def _write_graph(handle, graph: Graph) -> None:
    dumps = orjson.dumps
    handle.write(b'{"root":' + dumps(graph.root) + b',"dump_data_dir":' + dumps(graph.dump_data_dir)
                 + b',"node":{')
    first = True
    caches = new_caches()
    for name, node in graph.nodes.items():
        if not first:
            handle.write(b",")
        first = False
        handle.write(dumps(name) + b":" + dumps(node_object(node, caches=caches)))
    handle.write(b"}}")


def write_build(graph: Graph, path: str, overflow_check: bool) -> None:
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        _write_graph(handle, graph)
        handle.seek(handle.tell() - 1)     # reopen the top-level object for the remaining keys
        handle.write(b',"MicroSteps":' + orjson.dumps(graph.micro_steps) + b',"OverflowCheck":'
                     + orjson.dumps(overflow_check) + b"}")


def write_compare(npu: Graph, bench: Graph, path: str, task: str, tooltip: dict, colors: dict,
                  overflow_check: bool) -> None:
    """The two graphs are formatted at the same time where the system can fork: a child process writes the Bench
    half into a side file (it inherits the graphs, nothing is copied) while this process writes the NPU half."""
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        bench_path = temporary + ".bench"
        child = _fork_writer(bench, bench_path)
        try:
            handle.write(b'{"NPU":')
            _write_graph(handle, npu)
            handle.write(b',"Bench":')
            if child is None:
                _write_graph(handle, bench)
            else:
                _, status = os.waitpid(child, 0)
                child = None
                if status != 0:
                    raise OSError(f"writing the Bench graph failed (status {status})")
                with open(bench_path, "rb") as part:
                    shutil.copyfileobj(part, handle, 1 << 22)
        finally:
            if child is not None:
                os.waitpid(child, 0)
            if os.path.exists(bench_path):
                os.unlink(bench_path)
        tail = {"ToolTip": json.dumps(tooltip, ensure_ascii=False), "Colors": colors,
                "MicroSteps": max(npu.micro_steps, bench.micro_steps), "task": task,
                "OverflowCheck": overflow_check}
        handle.write(b"," + orjson.dumps(tail)[1:])


def _fork_writer(graph: Graph, path: str) -> int | None:
    if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        return None
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        with open(path, "wb") as part:
            _write_graph(part, graph)
        code = 0
    finally:
        os._exit(code)
