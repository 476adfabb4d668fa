"""merge_result: gather chosen APIs and metrics of every rank's compare result (xlsx or csv) into one workbook, one
sheet per metric, plus a consistency sheet for collective outputs."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from msprobe.dump.paths import check_input_file, load_yaml
from msprobe.errors import MsprobeError
from msprobe.log import get_logger, progress
from msprobe.substrings import SubstringIndex
from msprobe.table import columns as col
from msprobe.table.cells import NA
from msprobe.table.model import ResultTable
from msprobe.table.readers import read_table

# a rank's result, or a single process's (compare of a step folder of one proc<pid> folder): its column is named
# after it, rank<N> or proc<pid>
RESULT_NAME = re.compile(r"^compare_result_(?:rank(\d+)(?:-rank\d+)?|proc(\d+))_\d{14}\.(xlsx|csv)$")
SINGLE_RANK_NAME = re.compile(r"^compare_result_rank(?:-rank)?_\d{14}\.(xlsx|csv)$")
STATISTICS_INDEXES = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                      "MeanRelativeErr", "NormRelativeErr", col.REQUIRES_GRAD_CONSISTENT]
TENSOR_INDEXES = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                  "Five Thousandths Err Ratio", col.REQUIRES_GRAD_CONSISTENT]
REPLACED = (NA, "unsupported", "Nan")
# Collectives whose outputs must be identical on every rank of their group.
EQUAL_OUTPUT_APIS = ("all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "broadcast")
CONSISTENCY_SHEET = "Consistency"
CONSISTENCY_COLUMNS = [col.NPU_NAME, "Group", "Ranks", "Consistent", "Differing ranks", "Detail"]


# Bounds of a config: a list of API prefixes is a few kilobytes; beyond these it is refused, not slowly run.
MAX_CONFIG_BYTES = 1024 ** 2
MAX_APIS = 100_000
CONFIG_KEYS = ("api", "compare_index")
# Up to this many APIs, rows are selected by plain substring searches; above, by a SubstringIndex.
FEW_APIS = 32
LIST_CAP = 10          # APIs named per "not found" warning


@dataclass(frozen=True)
class MergeConfig:
    apis: tuple
    indexes: tuple          # empty = every index of the detected mode


@dataclass
class RankResult:
    label: str                                 # rank<N>, or proc<pid> for a single process's result
    path: str
    mode: str
    rows: dict = field(default_factory=dict)   # NPU Name -> {column: value}


class ApiSelection:
    """Which rows a config selects: those whose name contains `<api>.` for one of its APIs (spec §6), found in
    time linear in the names whatever the number of APIs."""

    def __init__(self, apis: tuple):
        self.keys = tuple(dict.fromkeys(f"{api}." for api in apis))
        self.index = SubstringIndex(self.keys) if len(self.keys) > FEW_APIS else None

    def matched(self, name: str) -> set:
        """The keys (`<api>.`) that name contains."""
        if self.index is not None:
            return set(self.index.find(name))
        return {key for key in self.keys if key in name}

    def __call__(self, name: str) -> bool:
        if self.index is not None:
            return bool(self.index.find(name))
        return any(key in name for key in self.keys)


def load_config(path: str) -> MergeConfig:
    size = os.path.getsize(check_input_file(path, "merge config file"))
    if size > MAX_CONFIG_BYTES:
        raise MsprobeError(f"{path} is {size} bytes; a merge config (a list of API prefixes) is at most "
                           f"{MAX_CONFIG_BYTES} bytes.")
    documents = load_yaml(path, "merge config file")
    if not documents:
        raise MsprobeError(f"{path} is empty, please check.")
    config = documents[0]
    if not isinstance(config, dict):
        raise MsprobeError(f"{path}: the config must be a mapping with 'api' (and optionally 'compare_index').")
    unknown = [key for key in config if key not in CONFIG_KEYS]
    if unknown:
        shown = ", ".join(repr(key) for key in unknown[:LIST_CAP]) + (", ..." if len(unknown) > LIST_CAP else "")
        get_logger().warning("%s: unknown key(s) ignored: %s (a merge config has 'api' and 'compare_index').",
                             path, shown)
    apis = config.get("api")
    if not apis:
        raise MsprobeError(f"{path}: The APIs required to merge data were not found ('api' is missing or empty).")
    if not isinstance(apis, list) or not all(isinstance(a, str) and a for a in apis):
        raise MsprobeError(f"{path}: The config format of 'api' is incorrect: it must be a list of API names.")
    if len(apis) > MAX_APIS:
        raise MsprobeError(f"{path}: 'api' lists {len(apis)} entries; at most {MAX_APIS} are supported.")
    indexes = config.get("compare_index") or []
    if not isinstance(indexes, list) or not all(isinstance(i, str) for i in indexes):
        raise MsprobeError(f"{path}: The config format of 'compare_index' is incorrect: it must be a list.")
    counts: dict = {}
    for index in indexes:
        counts[index] = counts.get(index, 0) + 1
    repeated = [index for index, count in counts.items() if count > 1]
    if repeated:
        get_logger().warning("%s: compare_index lists %s more than once; one sheet each.", path, ", ".join(repeated))
    return MergeConfig(tuple(dict.fromkeys(apis)), tuple(dict.fromkeys(indexes)))


def find_results(input_dir: str) -> list:
    """(label, path) of every rank's result in input_dir (rank<N>, ordered by rank, then proc<pid> by pid)."""
    logger = get_logger()
    found = []
    for name in sorted(os.listdir(input_dir)):
        path = os.path.join(input_dir, name)
        if not name.endswith((".xlsx", ".csv")) or not os.path.isfile(path):
            continue
        if SINGLE_RANK_NAME.match(name):
            logger.warning("Single rank compare result do not need to be merged: %s.", name)
            continue
        match = RESULT_NAME.match(name)
        if not match:
            if name.startswith("compare_result") or name.endswith(".xlsx"):
                raise MsprobeError(f"Wrong compare result name: {name}, please check! (expected "
                                   "compare_result_rank<N>_<14-digit timestamp>.xlsx or .csv, or "
                                   "compare_result_proc<pid>_<timestamp>.xlsx or .csv)")
            continue
        rank, pid = match.group(1), match.group(2)
        key = (0, int(rank)) if rank is not None else (1, int(pid))
        found.append((key, f"rank{rank}" if rank is not None else f"proc{pid}", path))
    found.sort()
    labels = [label for _, label, _ in found]
    duplicates = sorted({label for label in labels if labels.count(label) > 1}, key=labels.index)
    if duplicates:
        raise MsprobeError(f"{input_dir} holds several results for {duplicates[0]}; keep one per rank.")
    if len(found) < 2:
        raise MsprobeError(f"Number of compare result is no more than 1 in {input_dir}, no need to merge.")
    return [(label, path) for _, label, path in found]


KEPT_COLUMNS = {col.NPU_NAME, "NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max"} | set(STATISTICS_INDEXES) \
    | set(TENSOR_INDEXES)


def read_rank(label: str, path: str, selection: ApiSelection) -> RankResult:
    check_input_file(path, "compare result")
    keys = selection.keys if selection.index is None else ()
    header, rows = read_table(path, selection, KEPT_COLUMNS, keys)
    mode = col.table_mode(header)
    result = RankResult(label, path, mode or "unknown")
    if mode is None or not rows:
        return result
    kept = [(position, column) for position, column in enumerate(header) if column in KEPT_COLUMNS]
    for row in rows:
        record = {column: row[position] for position, column in kept if position < len(row)}
        name = record.get(col.NPU_NAME)
        if isinstance(name, str):
            result.rows[name] = record
    return result


def _read_many(arguments: list) -> list:
    return [read_rank(*a) for a in arguments]


def read_ranks(found: list, selection: ApiSelection, workers: int) -> list:
    """Every rank's selected rows; files are read by a pool of processes."""
    arguments = [(label, path, selection) for label, path in found]
    bar = progress(total=len(arguments), desc="Reading compare results")
    if workers <= 1 or len(arguments) < 4:
        results = []
        for argument in arguments:
            results.append(read_rank(*argument))
            bar.update(1)
    else:
        chunks = [arguments[i::workers] for i in range(workers)]
        results = []
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for chunk_result in pool.map(_read_many, chunks):
                results.extend(chunk_result)
                bar.update(len(chunk_result))
        order = {label: position for position, (label, _) in enumerate(found)}
        results.sort(key=lambda r: order[r.label])
    bar.close()
    return results


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _cell(record: dict, index: str, group_row: bool):
    value = record.get(index)
    text = value if isinstance(value, str) else None
    if group_row or text in REPLACED or value is None or text == "":
        return f"NPU:{_plain(record.get('NPU max'))}  Bench:{_plain(record.get('Bench max'))}"
    if index == col.REQUIRES_GRAD_CONSISTENT and text in ("True", "False"):
        return text == "True"
    return value


def _plain(value) -> str:
    if value is None or value in ("", "None"):       # an output that was None (spec §6: NPU:N/A  Bench:N/A)
        return NA
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


def _as_numbers(values: list) -> list:
    """A rank column whose every value is a number (no % texts) is written as numbers, as the reference does."""
    present = [v for v in values if v != ""]
    if present and all(_number(v) is not None and not isinstance(v, bool) for v in present):
        return ["" if v == "" else _to_number(v) for v in values]
    return values


def _to_number(value):
    number = _number(value)
    if isinstance(number, float) and number.is_integer() and isinstance(value, str) and "." not in value \
            and "e" not in value.lower():
        return int(number)
    return number


def merge(results: list, config: MergeConfig) -> tuple[list, list]:
    """(sheets, problems): sheets are (name, ResultTable)."""
    logger = get_logger()
    problems = []
    usable = []
    for result in results:
        if result.mode == col.MD5:
            problems.append(f"{result.label}: {os.path.basename(result.path)} is an md5 result; md5 results "
                            "cannot be merged.")
        elif result.mode == "unknown":
            problems.append(f"{result.label}: a valid dump task can not be identified from "
                            f"{os.path.basename(result.path)}.")
        else:
            usable.append(result)
    modes = {r.mode for r in usable}
    if len(modes) > 1:
        by_mode = {m: [os.path.basename(r.path) for r in usable if r.mode == m] for m in sorted(modes)}
        raise MsprobeError("The compare results mix modes: " + "; ".join(
            f"{m}: {', '.join(files)}" for m, files in by_mode.items()))
    if len(usable) < 2:
        raise MsprobeError("Nothing to merge: fewer than two usable compare results ("
                           + "; ".join(problems or ["no statistics or real-data results"]) + ").")
    mode = modes.pop()
    valid = STATISTICS_INDEXES if mode == col.STATISTICS else TENSOR_INDEXES
    indexes = list(config.indexes) or valid
    invalid = [i for i in indexes if i not in valid]
    if invalid:
        raise MsprobeError(f"compare_index {', '.join(invalid)} is not valid for {mode} results (valid: "
                           f"{', '.join(valid)}).")
    selection = ApiSelection(config.apis)
    for result in usable:
        found = set().union(*(selection.matched(name) for name in result.rows))
        missing = [key[:-1] for key in selection.keys if key not in found]
        for api in missing[:LIST_CAP]:
            logger.warning("%s not found in %s compare result.", api, result.label)
        if len(missing) > LIST_CAP:
            logger.warning("... and %d more APIs not found in %s compare result.", len(missing) - LIST_CAP,
                           result.label)
    names = sorted(set().union(*(r.rows for r in usable)))
    if not names:
        raise MsprobeError("Nothing to merge: none of the configured APIs occurs in the compare results.")
    rank_columns = [r.label for r in usable]
    sheets = []
    for index in indexes:
        cells = {col.NPU_NAME: names}
        for result, column in zip(usable, rank_columns):
            values = []
            for name in names:
                record = result.rows.get(name)
                values.append("" if record is None else _cell(record, index, name.endswith(".group")))
            cells[column] = _as_numbers(values)
        # every cell is checked for formulas: a rank's value is text taken from its result file
        sheets.append((index, ResultTable(columns=[col.NPU_NAME, *rank_columns], cells=cells,
                                          numeric_columns=frozenset(rank_columns),
                                          text_columns=frozenset([col.NPU_NAME, *rank_columns]))))
    sheets.append((CONSISTENCY_SHEET, consistency(usable, names)))
    return sheets, problems


def _group_of(result: RankResult, entry: str) -> str:
    record = result.rows.get(f"{entry}.input.group")
    return str(record.get("NPU max")) if record and record.get("NPU max") not in (None, NA, "") else ""


def consistency(results: list, names: list):
    """For outputs of collectives that must agree across a group, the ranks whose NPU statistics differ.
    Every rank belongs to the group its own `.group` argument names (all ranks when there is none)."""
    rows = {c: [] for c in CONSISTENCY_COLUMNS}
    for name in names:
        parts = name.split(".")
        # output.0 is the tensor (or list) the collective fills; later outputs are the other arguments
        if len(parts) < 6 or parts[1] not in EQUAL_OUTPUT_APIS or parts[3] != "forward" or parts[4:6] != ["output", "0"]:
            continue
        entry = ".".join(parts[:4])
        groups: dict = {}
        for result in results:
            if name in result.rows:
                groups.setdefault(_group_of(result, entry), []).append(result)
        for group, members in groups.items():
            if len(members) < 2:
                continue
            # members are in the order of the results (by rank); on a tie the first rank's signature wins
            signatures = {r.label: tuple(str(r.rows[name].get(f"NPU {s}")) for s in ("max", "min", "mean", "l2norm"))
                          for r in members}
            ranks = list(signatures)
            counts: dict = {}
            for signature in signatures.values():
                counts[signature] = counts.get(signature, 0) + 1
            majority = max(counts, key=lambda s: (counts[s], -min(i for i, r in enumerate(ranks) if signatures[r] == s)))
            differing = [r for r in ranks if signatures[r] != majority]
            rows[col.NPU_NAME].append(name)
            rows["Group"].append(group or "all ranks")
            rows["Ranks"].append(" ".join(ranks))
            rows["Consistent"].append(not differing)
            rows["Differing ranks"].append(" ".join(differing))
            rows["Detail"].append("; ".join(
                f"{r}: NPU max {signatures[r][0]}, l2norm {signatures[r][3]} (others {majority[0]}, {majority[3]})"
                for r in differing))
    return ResultTable(columns=list(CONSISTENCY_COLUMNS), cells=rows)
