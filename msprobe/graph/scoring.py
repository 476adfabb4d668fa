"""Compare columns on matched NPU nodes, the precision index per node (spec §7, read from the compare core's verdict:
issue 27), colours (§8), overflow levels (§9), and the summary's top nodes."""

from __future__ import annotations

import math

from msprobe.compare import verdict as judged
from msprobe.dump.naming import item_state
from msprobe.graph import floats
from msprobe.graph.texts import STAT_CELLS
from msprobe.graph.tree import COLLECTION, ROOT, Graph
from msprobe.table import columns as col
from msprobe.table.cells import NA, cell_text, stat_number

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

# The .vis precision index of statistics and real-data compares: the level of the node's verdict (compare/verdict.py:
# the worst of its output and parameter rows), one colour band per level; in the bands of carried differences the
# value grows with the outputs' scale-aware relative error r (r / (1 + r) of the band's width).
BANDS = [("#FFFCF3", [0, 0.2], "no difference beyond rounding, a framework convention, or no data"),
         ("#FFEDBE", [0.2, 0.4], "differs, carried from its inputs or within the lower precision's rounding (pass)"),
         ("#FFDC7F", [0.4, 0.6], "a warning or error carried from its inputs"),
         ("#FFC62E", [0.6, 0.8], "a warning made here (0.7): a rule on its own outputs that its inputs do not explain"),
         ("#FF704D", [0.8, 1], "made here: 0.85 the precision drops here (a dtype change made here, not read from an "
                               "input an earlier op already lowered, or a lower precision inside a module whose inputs "
                               "are identical), 1 an error its inputs and dtypes do not explain (Error_Origin "
                               "introduced, a shape, NaN or argument mismatch)")]
LEVEL_VALUE = {judged.MADE_HERE: 1.0, judged.PRECISION_HERE: 0.85, judged.WARNING_HERE: 0.7}
LEVEL_BAND = {judged.CARRIED_ISSUE: 0.4, judged.CARRIED: 0.2, judged.NOTHING: 0.0}
JSON_COLORS = {
    col.STATISTICS: [(colour, bucket) for colour, bucket, _ in BANDS],
    col.TENSOR: [(colour, bucket) for colour, bucket, _ in BANDS],
    col.MD5: [("#FFFCF3", [1, 1]), ("#FF704D", [0, 0])],
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
    if mode == col.MD5:
        for colour, bucket in JSON_COLORS[mode]:
            out[colour] = {"value": bucket,
                           "description": "all md5 values equal" if bucket == [1, 1] else "some md5 values differ"}
    else:
        for colour, bucket, text in BANDS:
            out[colour] = {"value": bucket, "description": text}
    out[GREY] = {"value": [], "description": "node not matched"}
    return out


def columns_used(mode: str, db: bool) -> list:
    """The columns of the compare core's table that attach_and_score reads: the shown ones, the verdict and what the
    scale-aware error is computed from."""
    judgement = [col.ERR_MESSAGE, col.ERROR_ORIGIN, "NPU Dtype", "Bench Dtype", "EucDist", judged.LEVELS] + \
        col.STAT_VALUES
    return [col.NPU_NAME, col.BENCH_NAME, col.RESULT] + (DB_COLUMNS if db else JSON_COLUMNS)[mode] + judgement


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
    scored = _scored_columns(cells, mode) if mode == col.MD5 else _verdict_columns(cells, mode)
    for node in npu.nodes.values():
        if node.node_type == COLLECTION or node.id == ROOT:
            continue
        rows = {key: row_of[key] for params in (node.input_data, node.output_data) for key in params
                if key in row_of}
        # the compare table's pairing decides (one verdict): a node the graph's tree matching leaves unlinked (its
        # partner of the same name sits under another parent, as when one run has an extra call) is scored by the
        # rows the table pairs it with
        if not node.link and not rows:
            continue
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
    """md5: the Result column, which the 1.x md5 index reads."""
    return [cells[col.RESULT]]


def _verdict_columns(cells: dict, mode: str) -> tuple:
    """(level, scale-aware relative error) of every row, from the compare core's verdict (compare/verdict.py)."""
    names = cells[col.NPU_NAME]
    levels = cells.get(judged.LEVELS)        # the verdict's own, when the table comes from this run's compare
    if levels is None:
        levels = judged.row_levels([item_state(name) for name in names], cells[col.RESULT], cells[col.ERR_MESSAGE],
                                   cells.get(col.ERROR_ORIGIN))
    return levels, judged.scale_errors(mode, cells)


def _json_index(node, mode: str, columns, row_of: dict) -> None:
    """md5: the 1.x index (1 when every input and output has the same CRC). Statistics and real data: the level of
    the node's verdict over its output and parameter rows (BANDS)."""
    if mode == col.MD5:
        results = columns[0]
        rows = [row_of[k] for p in (node.input_data, node.output_data) for k in p if k in row_of]
        same = all(results[r] == "pass" for r in rows) and len(rows) == len(node.input_data) + len(node.output_data)
        node.data["precision_index"] = 1 if same else 0
        node.data[col.RESULT] = "pass" if same else "Different"
        return
    levels, errors = columns
    rows = [row_of[k] for k in node.output_data if k in row_of]
    rows += [row_of[k] for k in node.input_data if k in row_of and (".parameters." in k
                                                                     or levels[row_of[k]] >= judged.WARNING_HERE)]
    if not rows:
        node.data["precision_index"] = 0
        return
    level = int(max(levels[r] for r in rows))
    value = LEVEL_VALUE.get(level)
    if value is None:
        worst = max((float(errors[r]) for r in rows if errors[r] == errors[r]), default=0.0)
        share = 1.0 if math.isinf(worst) else worst / (1.0 + worst)
        value = LEVEL_BAND[level] + 0.2 * min(share, 0.999)
    node.data["precision_index"] = round(value, 6)


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
    """The nodes of the largest precision error, in execution order (of their first compare row: an API before the
    module that holds it) among equal values."""
    scored = []
    for order, node in enumerate(npu.nodes.values()):
        if node.node_type == COLLECTION or node.id == ROOT or not node.rows:
            continue
        error = error_of(node, mode, db)
        if error:
            scored.append((-error, min(node.rows.values()), order, node.id, error))
    scored.sort()
    return [(name, error) for _, _, _, name, error in scored[:count]]


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
