"""The SQLite `.vis.db` of the 26.x reference (spec §12): tb_nodes, tb_config, tb_stack, one file for all
steps and ranks."""

from __future__ import annotations

import json
import sqlite3
from typing import NamedTuple

from msprobe.graph.texts import NODE_BATCH, Formatter
from msprobe.graph.tree import Graph

SCHEMA = """
CREATE TABLE IF NOT EXISTS tb_nodes (
    id TEXT PRIMARY KEY, graph_id TEXT NOT NULL, node_order INTEGER NOT NULL, node_name TEXT NOT NULL,
    node_type TEXT NOT NULL, up_node TEXT, sub_nodes TEXT, precision_index INTEGER, overflow_level TEXT,
    micro_step_id INTEGER NOT NULL, matched_node_link TEXT, stack_id TEXT, parallel_merge_info TEXT,
    matched_distributed TEXT, modified INTEGER NOT NULL, input_data TEXT, output_data TEXT, data_source TEXT,
    dump_data_dir TEXT, step INTEGER NOT NULL, rank INTEGER NOT NULL, is_distributed INTEGER);
CREATE TABLE IF NOT EXISTS tb_config (
    id TEXT PRIMARY KEY, graph_type TEXT NOT NULL, task TEXT, tool_tip TEXT, micro_steps INTEGER,
    overflow_check INTEGER, node_colors TEXT NOT NULL, rank_list TEXT NOT NULL, step_list TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tb_stack (id TEXT PRIMARY KEY, stack_info TEXT);
"""
INDEXES = """
CREATE INDEX IF NOT EXISTS index1 ON tb_nodes (step, rank, data_source, up_node, node_order);
CREATE INDEX IF NOT EXISTS index2 ON tb_nodes (step, rank, data_source, node_name);
CREATE INDEX IF NOT EXISTS index3 ON tb_nodes (step, rank, data_source, node_order);
CREATE INDEX IF NOT EXISTS index4 ON tb_nodes (step, rank, node_order);
CREATE INDEX IF NOT EXISTS index5 ON tb_nodes (step, rank, micro_step_id, node_order);
CREATE INDEX IF NOT EXISTS index6 ON tb_nodes (step, rank, modified, matched_node_link);
CREATE INDEX IF NOT EXISTS index7 ON tb_nodes (is_distributed);
"""


class NodeRow(NamedTuple):
    """One row of tb_nodes, its fields in the table's column order."""

    id: str
    graph_id: str
    node_order: int
    node_name: str
    node_type: str
    up_node: str
    sub_nodes: str
    precision_index: float | None
    overflow_level: str | None
    micro_step_id: int
    matched_node_link: str
    stack_id: str
    parallel_merge_info: str
    matched_distributed: str
    modified: int
    input_data: str
    output_data: str
    data_source: str
    dump_data_dir: str | None
    step: int
    rank: int
    is_distributed: int


def graph_rows(graph: Graph, source: str, step: int, rank: int, keep_md5: bool) -> tuple[list, list]:
    """(node rows, stack rows (id, stack text)) of one graph, nodes children first."""
    graph_id = f"{source}_{step}_{rank}"
    stacks: dict = {}
    stack_rows = []
    rows = []
    formatter = Formatter("db", keep_md5=keep_md5, spaced=True)
    order = graph.post_order()
    for start in range(0, len(order), NODE_BATCH):
        names = order[start:start + NODE_BATCH]
        nodes = [graph.nodes[name] for name in names]
        texts = formatter.nodes(nodes, graph.cells, graph.final_cells)
        for index, (name, node, (input_data, output_data)) in enumerate(zip(names, nodes, texts), start):
            stack_text = json.dumps(node.stack_info, ensure_ascii=False)
            for text in (name, input_data, output_data, stack_text):
                if not text.isascii():
                    text.encode()       # UnicodeEncodeError here, in the job, for text SQLite cannot store
            stack_id = stacks.get(stack_text)
            if stack_id is None:
                stack_id = stacks[stack_text] = f"{graph_id}_{len(stacks)}"
                stack_rows.append((stack_id, stack_text))
            rows.append(NodeRow(
                id=f"{graph_id}_{name}", graph_id=graph_id, node_order=index, node_name=name,
                node_type=str(node.node_type), up_node=node.upnode or "",
                sub_nodes=json.dumps(node.subnodes, ensure_ascii=False) if node.subnodes else "",
                precision_index=node.data.get("precision_index"), overflow_level=node.data.get("overflow_level"),
                micro_step_id=node.micro_step_id or 0, matched_node_link=json.dumps(node.link, ensure_ascii=False),
                stack_id=stack_id, parallel_merge_info="", matched_distributed="{}", modified=0,
                input_data=input_data, output_data=output_data, data_source=source,
                dump_data_dir=graph.dump_data_dir, step=step, rank=rank,
                is_distributed=int(name.startswith("Distributed"))))
    return rows, stack_rows


def write_db(path: str, parts: list, config: tuple) -> None:
    """parts: [(node rows, stack rows)]; config: the tb_config row. The file is written complete or not at all
    (the caller passes a temporary path)."""
    connection = sqlite3.connect(path)
    try:
        connection.executescript(SCHEMA)
        connection.execute("PRAGMA journal_mode=WAL")
        for rows, stack_rows in parts:
            connection.executemany("INSERT INTO tb_nodes VALUES (" + ",".join("?" * len(NodeRow._fields)) + ")",
                                   rows)
            connection.executemany("INSERT INTO tb_stack VALUES (?,?)", stack_rows)
        connection.execute("INSERT OR IGNORE INTO tb_config VALUES (?,?,?,?,?,?,?,?,?)", config)
        connection.executescript(INDEXES)
        connection.commit()
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def add_links(rows: list, links: dict) -> list:
    """The node rows with matched_distributed set (links: (data source, node name) -> value)."""
    out = []
    for row in rows:
        value = links.get((row.data_source, row.node_name))
        out.append(row if value is None else row._replace(matched_distributed=json.dumps(value, ensure_ascii=False)))
    return out
