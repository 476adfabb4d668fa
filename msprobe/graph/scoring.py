"""Compare columns on matched NPU nodes, the precision index per node (spec §7), colours (§8), overflow levels
(§9), and the summary's top nodes."""

from __future__ import annotations

import math

from msprobe.graph import floats
from msprobe.graph.texts import STAT_CELLS
from msprobe.graph.tree import COLLECTION, ROOT, Graph
from msprobe.table import columns as col
from msprobe.table.cells import NA, cell_text, number_or_none, stat_number

JSON_COLUMNS = {
    col.STATISTICS: col.STAT_DIFFS,
    col.TENSOR: ["Cosine", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio", "Five Thousandths Err Ratio"],
    col.MD5: [col.RESULT],
}
DB_COLUMNS = {
    col.STATISTICS: col.STAT_DIFFS + col.VERDICT,
    col.TENSOR: col.TENSOR_METRICS + col.VERDICT,
    col.MD5: [col.RESULT, col.REQUIRES_GRAD_CONSISTENT, col.ERR_MESSAGE],
}
TASK = {col.STATISTICS: "summary", col.MD5: "md5", col.TENSOR: "all"}
VERDICT_INDEX = {"pass": 0, "warning": 0.5, "error": 1}
GREY = "#C7C7C7"

_STATS_TEXT = "all outputs' relative statistic errors of this node; the darker, the larger the deviation"
JSON_COLORS = {
    col.STATISTICS: [("#FFFCF3", [0, 0.2]), ("#FFEDBE", [0.2, 0.4]), ("#FFDC7F", [0.4, 0.6]),
                     ("#FFC62E", [0.6, 0.8]), ("#FF704D", [0.8, 1])],
    col.TENSOR: [("#FFFCF3", [0, 0.05]), ("#FFEDBE", [0.05, 0.1]), ("#FFDC7F", [0.1, 0.15]),
                 ("#FFC62E", [0.15, 0.2]), ("#FF704D", [0.2, 1])],
    col.MD5: [("#FFFCF3", [1, 1]), ("#FF704D", [0, 0])],
}
JSON_DESCRIPTIONS = {
    col.STATISTICS: "maximum relative error of the node's output statistics; the darker, the larger the deviation",
    col.TENSOR: "drop of the One Thousandth Err Ratio from inputs to outputs; the darker, the larger the drop",
    col.MD5: "",
}
TOOLTIPS = {
    col.STATISTICS: {"Max diff": "difference of the maximum values of NPU and bench",
                     "Min diff": "difference of the minimum values of NPU and bench",
                     "Mean diff": "difference of the mean values of NPU and bench",
                     "L2norm diff": "difference of the L2 norms of NPU and bench"},
    col.MD5: {"md5": "CRC-32 of the data; equal values mean bit-identical data"},
    col.TENSOR: {"One Thousandth Err Ratio": "share of elements whose relative error is below 0.001",
                 "Five Thousandths Err Ratio": "share of elements whose relative error is below 0.005",
                 "Cosine": "cosine similarity of NPU and bench data",
                 "MaxAbsErr": "maximum absolute error", "MaxRelativeErr": "maximum relative error"},
}


def colors(mode: str, db: bool) -> dict:
    if db:
        return {"#FFFCF3": {"value": [0, 0.3], "description": "pass", "accuracy_level": "pass"},
                "#FFDC7F": {"value": [0.3, 0.6], "description": "warning", "accuracy_level": "warning"},
                "#FF704D": {"value": [0.6, 1], "description": "error", "accuracy_level": "error"},
                GREY: {"value": [], "description": "node not matched", "accuracy_level": "unmatched node"}}
    out = {}
    for colour, bucket in JSON_COLORS[mode]:
        text = JSON_DESCRIPTIONS[mode] or ("all md5 values equal" if bucket == [1, 1] else "some md5 values differ")
        out[colour] = {"value": bucket, "description": text}
    out[GREY] = {"value": [], "description": "node not matched"}
    return out


def columns_used(mode: str, db: bool) -> list:
    """The columns of the compare core's table that attach_and_score reads."""
    scored = ["MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "One Thousandth Err Ratio"]
    values = col.STAT_VALUES if db and mode == col.STATISTICS else []     # the .vis.db's own statistics cells
    return [col.NPU_NAME, col.BENCH_NAME, col.RESULT] + (DB_COLUMNS if db else JSON_COLUMNS)[mode] + scored + values


def attach_and_score(npu: Graph, cells: dict, mode: str, db: bool) -> None:
    """Give each matched NPU node the compare rows of its parameters (node.rows; the columns shown go to
    npu.cells) and set data.precision_index."""
    names, bench = cells[col.NPU_NAME], cells[col.BENCH_NAME]
    results = cells[col.RESULT]
    if NA in bench:
        row_of: dict = {}
        for index, (name, partner) in enumerate(zip(names, bench)):
            if partner != NA:
                row_of.setdefault(name, index)
    else:               # every row paired: the first row of each name (later duplicates give way)
        row_of = dict(zip(reversed(names), range(len(names) - 1, -1, -1)))
    scored = _scored_columns(cells, mode)
    for node in npu.nodes.values():
        if not node.link or node.node_type == COLLECTION or node.id == ROOT:
            continue
        rows = {key: row_of[key] for params in (node.input_data, node.output_data) for key in params
                if key in row_of}
        if rows:
            node.rows = rows
        if db:
            if rows:
                node.data["precision_index"] = max(VERDICT_INDEX.get(results[row], 0) for row in rows.values())
        else:
            _json_index(node, mode, scored, row_of)
    numbers = STAT_CELLS if mode == col.STATISTICS and not db else {}
    shown = {}
    if db and mode == col.STATISTICS:
        spelled = db_stat_cells(cells)
        cells = {**cells, **spelled}
        npu.final_cells = frozenset(spelled)
    for column in (DB_COLUMNS if db else JSON_COLUMNS)[mode]:
        if column in cells:
            values = cells[column]
            kept = {str, float} if column in numbers else {str}     # statistics diffs stay numbers until written
            if not set(map(type, values)) <= kept:
                values = [value if type(value) in kept else cell_text(value) for value in values]
            shown[column] = values
    npu.cells = shown
    _collections(npu, mode, db)


def db_stat_cells(cells: dict) -> dict:
    """The statistics diff columns (Max diff ... NormRelativeErr) spelled as the 26.x reference writes them into a
    .vis.db (they differ from its compare table): for two numbers the difference NPU - Bench as Python writes it
    (not rounded; "0" for two equal integers, "0.0" for two equal floats) and the relative error |diff / Bench| in
    percent with at most 6 decimals ("0.0%" when equal; "N/A" when Bench is 0); "Nan" for both where either value
    is NaN or infinite; "N/A" for both where either is not a number (null, a bool, text)."""
    out = {}
    for diff_name, rel_name, stat in zip(col.STAT_DIFFS[:4], col.STAT_DIFFS[4:], ("max", "min", "mean", "l2norm")):
        diffs, rels, divided, quotients = [], [], [], []
        for index, (n, b) in enumerate(zip(cells[f"NPU {stat}"], cells[f"Bench {stat}"])):
            if (n.__class__ is float or n.__class__ is int) and (b.__class__ is float or b.__class__ is int):
                if not (math.isfinite(stat_number(n)) and math.isfinite(stat_number(b))):   # ints beyond floats too
                    diffs.append("Nan")
                    rels.append("Nan")
                    continue
                diff = n - b
                diffs.append(repr(diff))
                if b == 0:
                    rels.append(NA)
                    continue
                divided.append(index)
                quotients.append(abs(stat_number(diff) / stat_number(b)) * 100)     # integers of any size
                rels.append(None)
            else:
                diffs.append(NA)
                rels.append(NA)
        for index, text in zip(divided, floats.cell_texts_db(quotients, "%")):
            rels[index] = text
        out[diff_name], out[rel_name] = diffs, rels
    return out


def _scored_columns(cells: dict, mode: str) -> list:
    """The columns the 1.x precision index of the mode reads (relative errors, One Thousandth Err Ratio, Result)."""
    names = {col.MD5: (col.RESULT,), col.STATISTICS: ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr",
                                                   "NormRelativeErr")}.get(mode, ("One Thousandth Err Ratio",))
    return [cells[c] for c in names if c in cells]


def _json_index(node, mode: str, columns: list, row_of: dict) -> None:
    """columns: _scored_columns. A cell counts as its number (`12.5%` -> 0.125), anything else is skipped."""
    if mode == col.MD5:
        results = columns[0]
        rows = [row_of[k] for p in (node.input_data, node.output_data) for k in p if k in row_of]
        same = all(results[r] == "pass" for r in rows) and len(rows) == len(node.input_data) + len(node.output_data)
        node.data["precision_index"] = 1 if same else 0
        node.data[col.RESULT] = "pass" if same else "Different"
    elif mode == col.STATISTICS:
        worst = 0.0
        for key in node.output_data:
            row = row_of.get(key)
            if row is None:
                continue
            for values in columns:
                value = values[row]
                value = value / 100 if type(value) is float else number_or_none(value)   # numbers are in percent
                if value is not None and abs(value) > worst:        # (NaN never is)
                    worst = abs(value)
        node.data["precision_index"] = min(worst, 1.0)
    else:
        ratios = columns[0] if columns else None
        lows = []
        for params in (node.input_data, node.output_data):
            low, seen = 1.0, False
            for key, item in params.items():
                row = row_of.get(key)
                value = None if row is None or ratios is None else number_or_none(ratios[row])
                if value is not None and item.get("shape") not in (None, "[]", []):
                    low, seen = min(low, value), True
            lows.append(low if seen else None)
        node.data["precision_index"] = (0 if None in lows else min(max(lows[0] - lows[1], 0.0), 1.0))


def _collections(npu: Graph, mode: str, db: bool) -> None:
    for node in npu.nodes.values():
        if node.node_type != COLLECTION or not node.link:
            continue
        values = [npu.nodes[c].data.get("precision_index") for c in node.subnodes]
        values = [v for v in values if v is not None]
        if db:
            if values:
                node.data["precision_index"] = max(values)
        elif mode == col.MD5:
            node.data["precision_index"] = min(values) if values else 1
        else:
            node.data["precision_index"] = max(values) if values else 0


def error_of(node, mode: str, db: bool) -> float | None:
    """How bad a node is, larger = worse (md5's 1.x index is 1 for equal)."""
    value = node.data.get("precision_index")
    if value is None:
        return None
    return 1 - value if mode == col.MD5 and not db else value


def top_nodes(npu: Graph, mode: str, db: bool, count: int = 10) -> list:
    scored = []
    for order, node in enumerate(npu.nodes.values()):
        if node.node_type == COLLECTION or node.id == ROOT or not node.rows:
            continue
        error = error_of(node, mode, db)
        if error:
            scored.append((-error, order, node.id, error))
    scored.sort()
    return [(name, error) for _, _, name, error in scored[:count]]


# --- overflow levels (spec §9) -------------------------------------------------------------------------------
_IGNORE = {
    "torch.empty": ("output.0",), "torch.empty_like": ("output.0",), "torch.empty_strided": ("output.0",),
    "distributed.recv": ("input.0", "input.tensor"), "distributed.all_gather": ("input.0",),
    "distributed.reduce_scatter": ("input.0", "input.output"), "distributed._reduce_scatter_base": ("input.0",),
    "distributed.all_gather_into_tensor": ("input.0",), "distributed.reduce_scatter_tensor": ("input.0",),
    "tensor.masked_fill_": ("input.0",),
}
_BAD = {"inf", "-inf", "nan"}


def _anomalous(item: dict) -> bool:
    return any(str(item.get(s)).lower() in _BAD for s in ("Max", "Min", "Mean"))


def _norms(params: dict) -> list:
    out = []
    for item in params.values():
        norm = item.get("Norm")
        if item.get("type") == "torch.Tensor" and isinstance(norm, (int, float)) and not math.isnan(norm):
            out.append(abs(float(norm)))
    return out


def overflow_levels(graph: Graph) -> int:
    """Set data.overflow_level on every dumped node with an anomaly; returns how many were set."""
    flagged = 0
    for node in graph.nodes.values():
        if not node.in_dump:
            continue
        inputs = {k: v for k, v in node.input_data.items() if ".parameters." not in k}
        bad_in = [k for k, v in inputs.items() if _anomalous(v)]
        bad_out = [k for k, v in node.output_data.items() if _anomalous(v)]
        level = None
        if bad_out and not bad_in:
            level = "critical"
        elif bad_in and bad_out:
            level = "high"
        elif bad_in:
            level = "medium"
        else:
            norms_in, norms_out = _norms(inputs), _norms(node.output_data)
            if norms_out:
                top_in, top_out = max(norms_in, default=0.0), max(norms_out)
                if (top_out / top_in > 100) if top_in else top_out > 100:
                    level = "high"
        if level and (bad_in or bad_out):
            rule = _IGNORE.get(".".join(node.id.lower().split(".")[:2]))
            if rule and all(any(k.endswith("." + r) for r in rule) for k in bad_in + bad_out):
                level = None
        if level:
            node.data["overflow_level"] = level
            flagged += 1
    return flagged
