"""Bind dump data to IR nodes by name (spec code_mapping.md §3-§5): kernel .npy files -> code_mapping CSV rows,
statistic.csv rows -> the same rows with `Code Stack` and `Scope Name` appended."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field

from msprobe.errors import DumpFormatError, PathError
from msprobe.io import atomic_path
from msprobe.log import get_logger
from msprobe.names import counter
from msprobe.substrings import SubstringIndex
from msprobe.table.model import ResultTable
from msprobe.table.safety import check_cells

COLUMNS = ("File Path", "Code Stack", "Scope Name")
STATISTIC_CSV = "statistic.csv"
MAPPING_CSV = "mapping.csv"


class ScopeIndex:
    """Scope-name keys (`/` -> `_`) of the IR nodes, matched as substrings of dump op names (spec §3): every key
    occurring anywhere in an op name matches, ordered by start position, then length (`SubstringIndex`)."""

    def __init__(self, nodes: list):
        by_key = {}
        for node in nodes:
            if node.scope:
                by_key[node.scope.replace("/", "_")] = node   # later nodes with the same scope win
        self.nodes = by_key
        self.index = SubstringIndex(by_key)
        self._cache: dict = {}

    def match(self, op_name: str) -> tuple:
        """The matched IR nodes of one op name, in the order of spec §3."""
        cached = self._cache.get(op_name)
        if cached is None:
            cached = self._cache[op_name] = tuple(self.nodes[key] for key in self.index.find(op_name))
        return cached


def code_stack(nodes: tuple) -> tuple[str, str]:
    """(Code Stack, Scope Name) cells of the matched nodes (spec §3): node by node, joined with '\n'.

    A node without source lines still takes its place, as an empty line (the reference does the same).
    """
    return "\n".join("\n".join(node.code) for node in nodes), "\n".join(node.scope for node in nodes)


@dataclass
class BindSummary:
    """What a run bound; the CLI prints it."""

    mode: str                                       # "tensor" | "statistic"
    files: int = 0                                  # .npy files, or statistic.csv files
    rows: int = 0                                   # output rows
    bound: int = 0                                  # rows matched to at least one IR node
    without_code: int = 0                           # bound rows whose nodes carry no source line
    unbound: list = field(default_factory=list)     # names of the rows with no IR node
    outputs: list = field(default_factory=list)     # files written


# -- discovery -------------------------------------------------------------------------------------------------
def _walk(root: str):
    """(directory, file names) below root, symbolically linked directories skipped, in sorted order."""
    for directory, subdirs, files in os.walk(root, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not os.path.islink(os.path.join(directory, d)))
        yield directory, sorted(files)


def find_dump_files(dump_data: str) -> tuple[str, list]:
    """("tensor", [.npy paths]) or ("statistic", [statistic.csv paths]) for --dump_data (spec §4, §5)."""
    if os.path.isfile(dump_data):
        name = os.path.basename(dump_data)
        if name.endswith(".npy"):
            return "tensor", [os.path.realpath(dump_data)]
        if name == STATISTIC_CSV:
            return "statistic", [os.path.realpath(dump_data)]
        if name.endswith((".gz", ".tgz", ".tar", ".zip")):
            raise DumpFormatError(f"--dump_data {dump_data} is an archive; extract it and pass the directory "
                                  "holding the .npy files or statistic.csv.")
        raise DumpFormatError(f"--dump_data {dump_data} is neither a .npy file nor a statistic.csv; pass one of "
                              "them or a directory of a MindSpore kernel dump.")
    npys, statistics = [], []
    for directory, files in _walk(dump_data):
        for name in files:
            if name.endswith(".npy"):
                npys.append(os.path.realpath(os.path.join(directory, name)))
            elif name == STATISTIC_CSV:
                statistics.append(os.path.realpath(os.path.join(directory, name)))
    if npys:
        return "tensor", npys
    if statistics:
        return "statistic", statistics
    raise DumpFormatError(f"--dump_data {dump_data} holds no .npy file and no statistic.csv (searched "
                          "recursively); pass the directory of a MindSpore kernel dump, e.g. dump/rank_0/Net/0/0.")


# -- tensor mode ----------------------------------------------------------------------------------------------
def _read_mapping(directory: str, cache: dict) -> dict:
    """mapping.csv of a directory: short `<N>.npy` name -> original long file name."""
    if directory not in cache:
        mapping = {}
        path = os.path.join(directory, MAPPING_CSV)
        if os.path.isfile(path):
            try:
                with open(path, newline="", encoding="utf-8", errors="replace") as handle:
                    for row in csv.reader(handle):
                        if len(row) >= 2:
                            mapping[row[0].strip()] = row[1].strip()
            except OSError as exc:
                raise PathError(f"cannot read {path}: {exc.strerror}.") from None
        cache[directory] = mapping
    return cache[directory]


def kernel_op_name(path: str, mappings: dict) -> str | None:
    """The op name (second '.'-field) of a kernel dump file; None for a short name missing from mapping.csv."""
    name = os.path.basename(path)[:-len(".npy")]
    if counter(name) is not None:
        original = _read_mapping(os.path.dirname(path), mappings).get(name + ".npy")
        if original is None:
            return None
        name = original[:-len(".npy")] if original.endswith(".npy") else original
    fields = name.split(".")
    return fields[1] if len(fields) > 1 else ""


def bind_tensor_files(paths: list, index: ScopeIndex) -> tuple[list, BindSummary]:
    """Rows (File Path, Code Stack, Scope Name) for the .npy files."""
    logger = get_logger()
    summary = BindSummary("tensor", files=len(paths))
    rows = []
    mappings: dict = {}
    unmapped = 0
    for path in paths:
        op_name = kernel_op_name(path, mappings)
        if op_name is None:
            unmapped += 1
            nodes = ()
        else:
            nodes = index.match(op_name)
        stack, scopes = code_stack(nodes)
        rows.append((path, stack, scopes))
        _count(summary, nodes, stack, os.path.basename(path))
    if unmapped:
        logger.warning("%d short-named .npy files have no row in their directory's mapping.csv; they are "
                       "written without code stack.", unmapped)
    summary.rows = len(rows)
    return rows, summary


def _count(summary: BindSummary, nodes: tuple, stack: str, name: str) -> None:
    if nodes:
        summary.bound += 1
        if not stack:
            summary.without_code += 1
    else:
        summary.unbound.append(name)


def statistic_output_path(source: str, base: str, output_dir: str) -> str:
    """<output>/<directory of source relative to base>/statistic.csv; never the source itself (DECISIONS 21)."""
    relative = os.path.relpath(os.path.dirname(source), base)
    directory = os.path.normpath(os.path.join(output_dir, relative)) if not relative.startswith("..") else output_dir
    target = os.path.join(directory, STATISTIC_CSV)
    if os.path.realpath(target) == os.path.realpath(source):
        raise PathError(f"the augmented copy of {source} would overwrite it; pass an --output directory other "
                        "than the dump's own.")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise PathError(f"cannot create output directory {directory}: {exc.strerror}.") from None
    return target


def write_outputs(outputs: list) -> None:
    """Every (path, header, rows) as a CSV as the reference's pandas writes it: UTF-8, '\\n' line ends, minimal
    quoting; atomically, 0640. Code Stack and Scope Name come from the IR: a formula-like cell is refused, as
    compare refuses one, before any file is written."""
    for path, header, rows in outputs:
        checked = {name: [row[i] for row in rows] for i, name in enumerate(header) if name in COLUMNS[1:]}
        check_cells(ResultTable(columns=list(checked), cells=checked), checked, path)
    for path, header, rows in outputs:
        with atomic_path(path) as temporary, open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)


# -- statistics mode ------------------------------------------------------------------------------------------
def bind_statistic_file(path: str, index: ScopeIndex, summary: BindSummary) -> tuple[list, list]:
    """(header, rows) of one statistic.csv with `Code Stack` and `Scope Name` appended (DECISIONS 21).

    Cells are copied as text, unchanged. MindSpore ends every data row with a comma; that empty trailing
    field, absent from the header, is dropped instead of becoming an `Unnamed: <k>` column (docs/code_mapping.md).
    """
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as handle:
            table = list(csv.reader(handle))
    except OSError as exc:
        raise PathError(f"cannot read {path}: {exc.strerror}.") from None
    except csv.Error as exc:
        raise DumpFormatError(f"{path} is not a readable CSV ({exc}).") from None
    if not table:
        raise DumpFormatError(f"{path} is empty; a statistic.csv starts with a header holding 'Op Name'.")
    header = table[0]
    while header and header[-1] == "":
        header = header[:-1]
    if "Op Name" not in header:
        raise DumpFormatError(f"{path} has no 'Op Name' column; it is not a MindSpore statistic.csv.")
    op_column = header.index("Op Name")
    width = len(header)
    rows = []
    for number, row in enumerate(table[1:], 2):
        if not row:
            continue
        if len(row) > width:
            if any(row[width:]):
                raise DumpFormatError(f"{path}: row {number} has {len(row)} fields, more than the {width} "
                                      "columns of the header.")
            row = row[:width]
        nodes = index.match(row[op_column]) if op_column < len(row) else ()
        stack, scopes = code_stack(nodes)
        rows.append(row + [""] * (width - len(row)) + [stack, scopes])
        _count(summary, nodes, stack, row[op_column] if op_column < len(row) else f"{path}: empty row")
    summary.rows += len(rows)
    return header + ["Code Stack", "Scope Name"], rows
