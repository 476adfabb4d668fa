"""Our .vis and .vis.db files loaded through tb-graph-ascend's own Python services (the code TensorBoard runs):
nodes, hierarchy, precision colours and stacks must come through. Skipped when the plugin is not installed
(`pip install "msprobe-toolkit[tensorboard]"`)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURES, only_file, run_cli

try:
    from server.app.service.graph_service_base import GraphServiceStrategy
    from server.app.service.graph_service_factory import ServiceFactory
    from server.app.service.graph_service_vis import JsonGraphService
    from server.app.utils.global_state import GraphState
except Exception as exc:  # noqa: BLE001 - any import failure means: no usable plugin
    pytest.skip(f"tb-graph-ascend is not importable ({type(exc).__name__}: {exc}); "
                'pip install "msprobe-toolkit[tensorboard]"', allow_module_level=True)

STATS = FIXTURES / "stats_mix_step0"


def _load(logdir: Path, tag: str) -> JsonGraphService:
    run = str(logdir)
    GraphState.set_global_value("logdir", str(logdir.parent))
    GraphState.set_global_value("runs", {logdir.name: run})
    GraphState.set_global_value("first_run_tags", {logdir.name: tag})
    GraphState.set_global_value("config_data", {})
    GraphState.set_global_value("current_tag", None)
    service = JsonGraphService(logdir.name, tag)
    events = list(service.load_graph_data())
    assert '"done": true' in events[-1], events[-1]
    return service


def test_compare_vis_through_plugin(tmp_path):
    logdir = tmp_path / "run"
    assert run_cli(["graph", "-tp", STATS / "target", "-gp", STATS / "golden", "-o", logdir]) == 0
    os.chmod(logdir, 0o750)
    tag = only_file(logdir, "compare_*.vis").name[:-len(".vis")]
    service = _load(logdir, tag)
    meta = {"run": logdir.name, "tag": tag, "microStep": -1}
    config = service.load_graph_config_info()
    assert config["success"], config
    assert config["data"]["isSingleGraph"] is False and config["data"]["task"] == "summary"
    assert config["data"]["colors"]["#FF704D"]["value"] == [0.8, 1]
    lists = service.load_graph_all_node_list(meta)
    assert lists["success"], lists
    data = lists["data"]
    assert len(data["npuNodeList"]) == 475 and len(data["benchNodeList"]) == 473
    assert sorted(data["npuUnMatchNodes"]) == ["Tensor.to.0.backward", "Tensor.to.1.backward", "Tensor.to.2.backward"]
    assert data["npuMatchNodes"]["Functional.linear.0.forward"] == "Functional.linear.0.forward"
    # hierarchy: expanding the root shows its children
    opened = service.change_node_expand_state({"nodeName": "root", "nodeType": "NPU"}, meta)
    assert opened["success"], opened
    assert "DefaultModel" in str(opened["data"]) and "Module.tok_emb.Embedding.forward.0" in str(opened["data"])
    expanded = service.change_node_expand_state({"nodeName": "Module.blocks.0.Block.forward.0", "nodeType": "NPU"},
                                                meta)
    assert expanded["success"], expanded
    assert "Module.blocks.0.attn.CausalSelfAttention.forward.0" in str(expanded["data"])
    # precision colours: the red bucket holds the node the statistics rules put there
    nodes = json.loads(only_file(logdir, "compare_*.vis").read_text())["NPU"]["node"]
    expected = {n for n, v in nodes.items() if not v["subnodes"] and 0.8 <= v["data"].get("precision_index", -1) < 1}
    red = service.search_node_by_precision(meta, [[0.8, 1]])
    assert red["success"] and expected and set(red["data"]) == expected
    info = service.get_node_info({"nodeName": "Module.tok_emb.Embedding.forward.0", "nodeType": "NPU"}, meta)
    assert info["success"]
    npu, bench = info["data"]["npu"], info["data"]["bench"]
    assert bench["id"] == "Module.tok_emb.Embedding.forward.0"
    assert len(npu["stack_info"]) == 1 and "self.tok_emb(" in npu["stack_info"][0]


def test_build_vis_through_plugin(tmp_path):
    logdir = tmp_path / "run"
    assert run_cli(["graph", "-tp", STATS / "target", "-o", logdir, "-oc"]) == 0
    os.chmod(logdir, 0o750)
    tag = only_file(logdir, "build_*.vis").name[:-len(".vis")]
    service = _load(logdir, tag)
    meta = {"run": logdir.name, "tag": tag, "microStep": -1}
    config = service.load_graph_config_info()
    assert config["success"] and config["data"]["isSingleGraph"] is True
    nodes = service.load_graph_all_node_list(meta)
    assert nodes["success"] and len(nodes["data"]["npuNodeList"]) == 475
    info = service.get_node_info({"nodeName": "Functional.linear.0.forward", "nodeType": "Single"}, meta)
    assert info["data"]["npu"]["upnode"] == "Module.blocks.0.attn.qkv.Linear.forward.0"


# ---- .vis.db through the plugin's DB service -------------------------------------------------------------------


def _load_db(logdir: Path):
    """What TensorBoard does for a run holding a .vis.db: /load_meta_dir scans the log directory (a folder with a
    .vis.db is a run of type "db", the file name without .vis.db its tag), then the view's ServiceFactory builds the
    DbGraphService for (type, run, tag), and /loadGraphData and /loadGraphConfigInfo are called before anything
    else. Returns the service and the metaData the frontend sends with every later request."""
    GraphState.reset_global_state()
    GraphState.set_global_value("logdir", str(logdir.parent))
    scan = GraphServiceStrategy.load_meta_dir()
    assert not scan["error"], scan
    assert scan["data"][logdir.name]["type"] == "db", scan
    (tag,) = scan["data"][logdir.name]["tags"]
    service = ServiceFactory().create_strategy("db", logdir.name, tag)
    assert type(service).__name__ == "DbGraphService"
    assert service.load_graph_data() == {"success": True}
    config = service.load_graph_config_info()
    assert config["success"], config
    # the frontend offers the ranks and steps of tb_config and sends the selected ones (microStep -1: all)
    (rank,), (step,) = config["data"]["ranks"], config["data"]["steps"]
    meta = {"run": logdir.name, "tag": tag, "type": "db", "rank": rank, "step": step, "microStep": -1}
    return service, config["data"], meta


def _db_nodes(path: Path, source: str) -> dict:
    """Our own rows of one side, in node order: name -> row (as dict)."""
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    try:
        rows = connection.execute("select n.*, s.stack_info from tb_nodes n left join tb_stack s "
                                  "on n.stack_id = s.id where data_source = ? order by node_order", (source,))
        return {row["node_name"]: dict(row) for row in rows}
    finally:
        connection.close()


def _is_leaf(row: dict) -> bool:
    return json.loads(row["sub_nodes"] or "[]") == []


def _link(row: dict) -> list:
    return json.loads(row["matched_node_link"] or "[]")


def test_compare_db_through_plugin(tmp_path):
    logdir = tmp_path / "logs" / "run"
    assert run_cli(["graph", "-tp", STATS / "target", "-gp", STATS / "golden", "-o", logdir, "--format", "db"]) == 0
    os.chmod(logdir, 0o750)
    path = only_file(logdir, "compare_*.vis.db")
    npu, bench = _db_nodes(path, "NPU"), _db_nodes(path, "Bench")
    assert len(npu) == 475 and len(bench) == 473
    service, config, meta = _load_db(logdir)
    assert meta["tag"] == path.name[:-len(".vis.db")] and (meta["rank"], meta["step"]) == (0, 0)
    assert config["isSingleGraph"] is False and config["task"] == "summary" and config["microSteps"] == 1
    assert config["overflowCheck"] is False and set(config["tooltips"]) == {"Max diff", "Min diff", "Mean diff",
                                                                          "L2norm diff"}
    # the 26.x verdict colours: pass / warning / error / unmatched
    assert {c: v["value"] for c, v in config["colors"].items()} == {
        "#FFFCF3": [0, 0.3], "#FFDC7F": [0.3, 0.6], "#FF704D": [0.6, 1], "#C7C7C7": []}

    # node lists, matched and unmatched nodes: exactly our rows, in our node order
    lists = service.load_graph_all_node_list(meta)
    assert lists["success"], lists
    data = lists["data"]
    assert data["npuNodeList"] == list(npu) and data["benchNodeList"] == list(bench)
    assert data["npuMatchNodes"] == {n: _link(r)[-1] for n, r in npu.items() if _link(r)}
    assert data["benchMatchNodes"] == {n: _link(r)[-1] for n, r in bench.items() if _link(r)}
    assert len(data["npuMatchNodes"]) == 472 and len(data["benchMatchNodes"]) == 472
    assert data["npuMatchNodes"]["Functional.linear.0.forward"] == "Functional.linear.0.forward"
    assert data["npuUnMatchNodes"] == ["Tensor.to.2.backward", "Tensor.to.1.backward", "Tensor.to.0.backward"]
    assert data["benchUnMatchNodes"] == ["Tensor.to.0.backward"]

    # hierarchy: the root opens on DefaultModel and its children; expanding a module shows its children
    opened = service.change_node_expand_state({"nodeName": "root", "nodeType": "NPU"}, meta)
    assert opened["success"], opened
    top = json.loads(npu["DefaultModel"]["sub_nodes"])
    assert len(top) == 18 and "Module.tok_emb.Embedding.forward.0" in top
    assert set(opened["data"]) == {"DefaultModel", *top}
    assert opened["data"]["DefaultModel"]["isRoot"] and opened["data"]["DefaultModel"]["expand"]
    assert all(opened["data"][child]["parentNode"] == "DefaultModel" for child in top)
    block = "Module.blocks.0.Block.forward.0"
    expanded = service.change_node_expand_state({"nodeName": block, "nodeType": "NPU"}, meta)
    assert expanded["success"], expanded
    children = json.loads(npu[block]["sub_nodes"])
    assert "Module.blocks.0.attn.CausalSelfAttention.forward.0" in children
    assert set(expanded["data"]) == {"DefaultModel", *top, *children} and expanded["data"][block]["expand"]
    assert all(expanded["data"][child]["parentNode"] == block for child in children)
    # what the frontend colours a node by: its precision index and its match link, as in our rows
    for name in ("Module.lm_head.Linear.forward.0", "Module.tok_emb.Embedding.forward.0", block):
        assert expanded["data"][name]["precisionIndex"] == npu[name]["precision_index"]
        assert expanded["data"][name]["matchedNodeLink"] == _link(npu[name])
    assert expanded["data"]["Module.lm_head.Linear.forward.0"]["precisionIndex"] == 0.5
    bench_root = service.change_node_expand_state({"nodeName": "root", "nodeType": "Bench"}, meta)
    assert bench_root["success"] and set(bench_root["data"]) == {"DefaultModel",
                                                                 *json.loads(bench["DefaultModel"]["sub_nodes"])}

    # precision colours: searching a colour's range returns the leaf nodes our file puts there
    buckets = {}
    for colour, value in config["colors"].items():
        if not value["value"]:
            continue
        low, high = value["value"]
        expected = [n for n, r in npu.items() if _is_leaf(r) and r["precision_index"] is not None
                    and low <= r["precision_index"] <= high]
        found = service.search_node_by_precision(meta, [[low, high]])
        assert found["success"] and found["data"] == expected, colour
        buckets[value["description"]] = expected
    assert buckets["error"] == ["Functional.linear.2.forward", "Functional.linear.2.backward"]
    assert buckets["warning"] == ["Functional.linear.8.forward", "Functional.softmax.1.backward",
                                  "Tensor.addcdiv_.17.forward"]
    assert len(buckets["pass"]) == 347
    unmatched = service.search_node_by_precision(meta, [-1])
    assert unmatched["success"] and unmatched["data"] == data["npuUnMatchNodes"]

    # node details: both sides, their data and the stacks (the plugin INNER JOINs tb_stack)
    name = "Module.tok_emb.Embedding.forward.0"
    info = service.get_node_info({"nodeName": name, "nodeType": "NPU"}, meta)
    assert info["success"], info
    mine, theirs = info["data"]["npu"], info["data"]["bench"]
    assert mine["id"] == name and theirs["id"] == name and mine["upnode"] == "DefaultModel"
    # a module node keeps its whole stack in the db, as the reference's .vis.db does (issue 19)
    assert mine["stack_info"] == json.loads(npu[name]["stack_info"]) and len(mine["stack_info"]) > 1
    assert any("self.tok_emb(" in line for line in mine["stack_info"])
    assert theirs["stack_info"] == json.loads(bench[name]["stack_info"])
    assert mine["output_data"] == json.loads(npu[name]["output_data"])
    assert mine["input_data"] == json.loads(npu[name]["input_data"]) and mine["input_data"]
    assert mine["data"]["precision_index"] == npu[name]["precision_index"]
    worst = service.get_node_info({"nodeName": "Functional.linear.2.forward", "nodeType": "NPU"}, meta)["data"]["npu"]
    assert worst["data"]["precision_index"] == 1
    assert worst["output_data"]["Functional.linear.2.forward.output.0"]["Result"] == "error"
    lonely = service.get_node_info({"nodeName": "Tensor.to.1.backward", "nodeType": "NPU"}, meta)
    assert lonely["success"] and lonely["data"]["npu"]["id"] == "Tensor.to.1.backward"
    assert lonely["data"]["bench"] is None


def test_build_db_through_plugin(tmp_path):
    logdir = tmp_path / "logs" / "run"
    assert run_cli(["graph", "-tp", STATS / "target", "-o", logdir, "-oc", "--format", "db"]) == 0
    os.chmod(logdir, 0o750)
    path = only_file(logdir, "build_*.vis.db")
    npu = _db_nodes(path, "NPU")
    assert len(npu) == 475 and not _db_nodes(path, "Bench")
    service, config, meta = _load_db(logdir)
    assert config["isSingleGraph"] is True and config["overflowCheck"] is True
    nodes = service.load_graph_all_node_list(meta)
    assert nodes["success"] and nodes["data"] == {"npuNodeList": list(npu)}
    opened = service.change_node_expand_state({"nodeName": "root", "nodeType": "Single"}, meta)
    assert opened["success"] and set(opened["data"]) == {"DefaultModel", *json.loads(npu["DefaultModel"]["sub_nodes"])}
    # selecting a deep node opens its parent chain (the search box); clicking it then opens the node itself
    qkv, attn = "Module.blocks.0.attn.qkv.Linear.forward.0", "Module.blocks.0.attn.CausalSelfAttention.forward.0"
    selected = service.change_node_expand_state({"nodeName": qkv, "nodeType": "Single"}, meta)
    assert selected["success"] and selected["data"][qkv]["parentNode"] == attn and not selected["data"][qkv]["expand"]
    assert selected["data"][attn]["expand"] and selected["data"]["Module.blocks.0.Block.forward.0"]["expand"]
    expanded = service.change_node_expand_state({"nodeName": qkv, "nodeType": "Single"}, meta)
    assert expanded["success"] and expanded["data"][qkv]["expand"]
    assert expanded["data"]["Functional.linear.0.forward"]["parentNode"] == qkv
    info = service.get_node_info({"nodeName": "Functional.linear.0.forward", "nodeType": "Single"}, meta)
    assert info["success"]
    node = info["data"]["npu"]
    assert node["upnode"] == qkv and node["stack_info"] == json.loads(npu["Functional.linear.0.forward"]["stack_info"])
    assert node["output_data"] == json.loads(npu["Functional.linear.0.forward"]["output_data"]) and node["output_data"]
    # overflow search (the -oc marks): the leaf nodes our file marks at each level
    counts = {}
    for level in ("medium", "high", "critical"):
        expected = [n for n, r in npu.items() if _is_leaf(r) and r["overflow_level"] == level]
        found = service.search_node_by_overflow(meta, [level])
        assert found["success"] and found["data"] == expected, level
        counts[level] = len(expected)
    assert counts == {"medium": 2, "high": 31, "critical": 0}
