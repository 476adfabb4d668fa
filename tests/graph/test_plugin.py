"""Our .vis and .vis.db files loaded through tb-graph-ascend's own Python services (the code TensorBoard runs):
nodes, hierarchy, precision colours and stacks must come through. Skipped when the plugin is not installed
(`pip install tb-graph-ascend==8.3.2 tensorboard`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import FIXTURES, only_file, run_cli

try:
    from server.app.service.graph_service_vis import JsonGraphService
    from server.app.utils.global_state import GraphState
except Exception as exc:  # noqa: BLE001 - any import failure means: no usable plugin
    pytest.skip(f"tb-graph-ascend is not importable ({type(exc).__name__}: {exc}); "
                "pip install tb-graph-ascend==8.3.2 tensorboard", allow_module_level=True)

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
