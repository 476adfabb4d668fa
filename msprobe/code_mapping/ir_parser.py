"""Streaming parser of the MindSpore text IR (`*.ir`, `*.ir.gz`): CNodes with their scope and source lines.

Grammar and rules: spec code_mapping.md §2. The file is read line by line, once; only the nodes are kept, with
their source lines interned (the same `# In file` line repeats on thousands of nodes), so a 100 MB IR costs a
few times the size of its distinct lines, never the whole text.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from dataclasses import dataclass, field

from msprobe.dump.paths import SIZE_LIMITS
from msprobe.errors import MsprobeError

GZIP_MAGIC = b"\x1f\x8b"
# Every pattern below runs in time linear in the line it reads (an IR is input: a hostile line must not make a
# pattern backtrack over it again and again); the scope comment and the primal attributes are found with plain
# searches (scope_in, primal_attrs), as a single pattern for them backtracks cubically.
# A node line: `%<n>(<var_name>) = <OpName>(<args>) <attrs>`. The op name stops at the first `(`; a variable
# name holds no parenthesis (with `\S+` a line of `)=)=)=...` is quadratic).
NODE_RE = re.compile(r"\s*(%\d+)\(([^\s()]+)\)\s*=\s*([^\s(]+)\(")
# `# Fullname with scope: (<scope>)` -- any comment whose label contains "scope" (spec §2): scope_in().
_SCOPE_WORD = re.compile("scope", re.IGNORECASE)
_SCOPE_OPEN = re.compile(r":\s*\(")
_PRIMAL_ATTRS_OPEN = re.compile(r"cnode_primal_attrs:\s*\{")
UNIQUE_ID_RE = re.compile(r"\b(?:forward_unique_id|unique_id)\b\s*:\s*\"(\d+)\"", re.IGNORECASE)
SUBGRAPH_RE = re.compile(r"subgraph\s+@([^\s(]+)")
ENTRY_RE = re.compile(r"#\s*IR entry\s*:\s*@(\S+)")
TOTAL_RE = re.compile(r"#\s*Total subgraphs\s*:\s*(\d+)")
INPUT_RE = re.compile(r"[%@][\w.$:\-]+")
PAREN_RE = re.compile(r"[()]")
# Lines that only an IR has; a file without one of them in its first lines is not an IR.
IR_MARKERS = ("# IR entry", "subgraph @", "subgraph attr", "%para", "# Total subgraphs", "# Params:")
SNIFF_LINES = 2000
LONGEST_LINE = 64 * 1024 * 1024         # characters of one IR line; a longer one is refused when reached
UNPACKED_LIMIT = SIZE_LIMITS[".ir"]     # bytes a gzip-compressed IR may unpack to: the limit of a plain .ir file
# An argument list that is still open after this many lines is not an IR argument list.
MAX_ARG_LINES = 100_000


def scope_in(text: str, at_start: bool = False) -> str | None:
    r"""The scope of a `# <label holding "scope">: (<scope>)` comment in `text` (at_start: the text must start with
    its `#`), as the pattern `#.*?scope.*?:\s*\((.*?)\)` (case-insensitive) finds it, in linear time: after the
    first `#` the first "scope", after it the first `:` followed by white space and `(`, and the text from there
    to the first `)`. Where that fails, the pattern fails from every later `#` too; None then."""
    hash_at = 0 if at_start else text.find("#")
    if hash_at < 0 or not text.startswith("#", hash_at):
        return None
    word = _SCOPE_WORD.search(text, hash_at + 1)
    opening = _SCOPE_OPEN.search(text, word.end()) if word else None
    close = text.find(")", opening.end()) if opening else -1
    return text[opening.end():close] if close >= 0 else None


def primal_attrs(text: str):
    r"""The texts between `cnode_primal_attrs: {` and the next `}`, in order (as the pattern
    `cnode_primal_attrs:\s*\{([^}]*)\}` finds them, in linear time)."""
    position = 0
    while True:
        opening = _PRIMAL_ATTRS_OPEN.search(text, position)
        close = text.find("}", opening.end()) if opening else -1
        if close < 0:
            return
        yield text[opening.end():close]
        position = close + 1


class IRFormatError(MsprobeError):
    """The --ir file is not a readable MindSpore text IR (wrong kind of file, truncated, corrupt gzip)."""


@dataclass(slots=True)
class IRNode:
    """One CNode of the IR (spec §2)."""

    key: str                 # "<%n>&<var_name>", e.g. "%0&CNode_11"; the first occurrence of a key wins
    op: str                  # operator, e.g. PrimFunc_MatMul, Load
    subgraph: str            # name of the enclosing subgraph ("" outside any)
    line: int                # 1-based line of the node in the IR file
    inputs: tuple = ()       # `%...` / `@...` argument tokens (predecessors, callees); not used for output
    scope: str = ""          # `Fullname with scope`, '/'-separated; "" when the IR gives none
    unique_id: str = ""      # last unique_id / forward_unique_id of cnode_primal_attrs; "" when absent
    code: tuple = ()         # source lines, e.g. "In file /home/user/toy.py:21, 14~27/        y = self.dense(x)"
    code_from: str = ""      # key of the forward node whose code a Gradients node took (spec §2, backward)


@dataclass
class IRGraph:
    """What the parser keeps of one IR file."""

    path: str
    entry: str = ""                                  # `# IR entry: @<name>`
    subgraphs: list = field(default_factory=list)    # subgraph names in file order
    nodes: list = field(default_factory=list)        # IRNode, first occurrence of every key, in file order
    lines: int = 0
    declared_subgraphs: int | None = None            # `# Total subgraphs: <n>` of the header

    @property
    def scoped(self) -> list:
        return [node for node in self.nodes if node.scope]


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == GZIP_MAGIC


class _Unpacked(io.RawIOBase):
    """The bytes a gzip file unpacks to, refused once they exceed UNPACKED_LIMIT (a small file can unpack to
    terabytes)."""

    def __init__(self, path: str):
        super().__init__()
        self.path, self.stream, self.total = path, gzip.open(path, "rb"), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.stream.readinto(buffer)
        self.total += count
        if self.total > UNPACKED_LIMIT:
            raise IRFormatError(f"{self.path} unpacks to more than {UNPACKED_LIMIT} bytes, the limit of an IR "
                                "file; refused.")
        return count

    def close(self) -> None:
        self.stream.close()
        super().close()


def open_ir_text(path: str):
    """A text stream of the IR; gzip is recognised by its magic bytes, whatever the file is called."""
    raw = io.BufferedReader(_Unpacked(path)) if _is_gzip(path) else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)


def _lines(text):
    """The lines of an IR text stream, none of them read beyond LONGEST_LINE characters."""
    while line := text.readline(LONGEST_LINE):
        if len(line) >= LONGEST_LINE and not line.endswith("\n"):
            yield None
            return
        yield line


class _Parser:
    """The line-by-line state machine behind parse_ir()."""

    def __init__(self, path: str):
        self.graph = IRGraph(path)
        self.seen: set = set()        # keys of the nodes of subgraph bodies
        self.outside: dict = {}       # key -> node outside any subgraph body; body nodes win (spec §2)
        self.subgraph = ""            # name of the open subgraph body, "" when none
        self.subgraph_line = 0
        self.pending: list = []       # nodes whose scope line has not come yet
        self.collecting: IRNode | None = None   # node receiving `# ...` source lines
        self.code: list = []
        self.args_open: IRNode | None = None    # node whose argument list continues on the next line
        self.args_depth = 0
        self.args_lines = 0
        self.args_text: list = []
        self.interned: dict = {}
        self.marker_seen = False

    # -- node lines -------------------------------------------------------------------------------
    def _start_node(self, match, line: str, number: int) -> None:
        node = IRNode(f"{match.group(1)}&{match.group(2)}", match.group(3), self.subgraph, number)
        self.pending.append(node)
        self._close_args(line, match.end(), 1, node)

    def _close_args(self, line: str, start: int, depth: int, node: IRNode) -> None:
        """Balance the parentheses of the argument list from `start`; what follows it may hold the attrs."""
        end = -1
        for paren in PAREN_RE.finditer(line, start):
            depth += 1 if paren.group() == "(" else -1
            if depth == 0:
                end = paren.start()
                break
        if end < 0:
            self.args_open, self.args_depth = node, depth
            self.args_text.append(line[start:])
            self.args_lines += 1
            if self.args_lines > MAX_ARG_LINES:
                raise IRFormatError(f"{self.graph.path}: the argument list of node {node.key} (line {node.line}) "
                                    f"is still open after {MAX_ARG_LINES} lines; this is not a MindSpore IR.")
            return
        self.args_text.append(line[start:end])
        node.inputs = tuple(INPUT_RE.findall("".join(self.args_text)))
        self.args_open, self.args_text, self.args_lines = None, [], 0
        self._after_args(line[end + 1:])

    def _after_args(self, text: str) -> None:
        """Text after the argument list and before the scope line: the unique id, or the scope itself."""
        if "unique_id" in text.lower():
            self._take_unique_id(text)
        if "#" in text and "scope" in text.lower():
            scope = scope_in(text)
            if scope is not None:
                self._take_scope(scope)

    def _take_unique_id(self, text: str) -> None:
        for attrs in primal_attrs(text):
            ids = UNIQUE_ID_RE.findall(attrs)
            if ids:
                for node in self.pending:
                    node.unique_id = ids[-1]

    def _take_scope(self, scope: str) -> None:
        """Every node waiting for a scope takes this one; the source lines below go to the latest node only
        (an earlier one ends where the next node starts, before this line)."""
        for node in self.pending:
            node.scope = scope
        self.collecting = self.pending[-1]
        self.code = []
        self.pending = []

    def _finish_code(self) -> None:
        if self.collecting is not None:
            self.collecting.code = tuple(self.code)
            self.collecting = None
            self.code = []

    def _finish_node_group(self) -> None:
        """End of a subgraph body: nodes still waiting for a scope keep none."""
        self._finish_code()
        self.pending = []

    def _register(self, node: IRNode) -> None:
        if not node.subgraph:
            self.outside.setdefault(node.key, node)
        elif node.key not in self.seen:
            self.seen.add(node.key)
            self.graph.nodes.append(node)

    # -- the loop -------------------------------------------------------------------------------
    def feed(self, line: str, number: int) -> None:
        if self.args_open is not None:
            stripped = line.lstrip()
            if stripped.startswith(("#", "}")) or NODE_RE.match(line):
                # The list never closed: take it as ended and read this line normally.
                node = self.args_open
                node.inputs = tuple(INPUT_RE.findall("".join(self.args_text)))
                self.args_open, self.args_text, self.args_lines = None, [], 0
            else:
                self._close_args(line, 0, self.args_depth, self.args_open)
                return
        stripped = line.lstrip()
        if not stripped:
            self._finish_code()
            return
        first = stripped[0]
        if first == "#":
            if self.collecting is not None:
                # spec §2: from "# " to the end of the line, '#'/' ' then '/' stripped at both ends
                entry = stripped[stripped.find("# "):].strip("# ").strip("/") if "# " in stripped else None
                if entry is None:
                    self._finish_code()
                else:
                    self.code.append(self.interned.setdefault(entry, entry))
                    return
            if self.pending:
                if "scope" in stripped.lower():
                    scope = scope_in(stripped, at_start=True)
                    if scope is not None:
                        self._take_scope(scope)
                        return
                if "unique_id" in stripped.lower():
                    self._take_unique_id(stripped)
                return
            if not self.graph.entry and stripped.startswith("# IR entry"):
                match = ENTRY_RE.match(stripped)
                if match:
                    self.graph.entry = match.group(1)
            if self.graph.declared_subgraphs is None and stripped.startswith("# Total subgraphs"):
                match = TOTAL_RE.match(stripped)
                if match:
                    self.graph.declared_subgraphs = int(match.group(1))
            if not self.marker_seen and stripped.startswith(IR_MARKERS):
                self.marker_seen = True
            return
        if first == "%":
            match = NODE_RE.match(line)
            if match:
                self._finish_code()
                self.marker_seen = True
                self._start_node(match, line, number)
                self._register(self.pending[-1])
                return
            if stripped.startswith("%para"):
                self.marker_seen = True
        elif first == "}" and self.subgraph:
            self._finish_node_group()
            self.subgraph = ""
            return
        elif first == "s" and stripped.startswith("subgraph @"):
            self._finish_node_group()
            match = SUBGRAPH_RE.match(stripped)
            name = match.group(1) if match else f"<line {number}>"
            self.graph.subgraphs.append(name)
            self.marker_seen = True
            if stripped.rstrip().endswith("{"):
                self.subgraph, self.subgraph_line = name, number
            return
        elif not self.marker_seen and stripped.startswith(IR_MARKERS):
            self.marker_seen = True
        if self.collecting is not None and "# " in line:
            entry = line[line.find("# "):].strip("# ").strip("/")
            self.code.append(self.interned.setdefault(entry, entry))
            return
        self._finish_code()
        if self.pending and "unique_id" in line.lower():
            self._take_unique_id(line)

    def finish(self, number: int) -> IRGraph:
        path = self.graph.path
        if self.args_open is not None:
            raise IRFormatError(f"{path} is truncated: the argument list of node {self.args_open.key} "
                                f"(line {self.args_open.line}) is still open at the end of the file.")
        if self.subgraph:
            raise IRFormatError(f"{path} is truncated: subgraph @{self.subgraph} (line {self.subgraph_line}) "
                                f"has no closing '}}' at the end of the file (line {number}).")
        if not self.graph.subgraphs and not self.seen and not self.outside:
            raise IRFormatError(f"{path} is incomplete: it ends at line {number}, inside its header, before any "
                                "subgraph or node (a file cut while it was written or copied?).")
        self._finish_node_group()
        self.graph.nodes.extend(node for key, node in self.outside.items() if key not in self.seen)
        self.graph.lines = number
        link_backward(self.graph.nodes)
        return self.graph


def link_backward(nodes: list) -> None:
    """Gradients nodes without source lines of their own take those of the forward node their
    forward_unique_id names (spec §2 "Backward association", §2.1).

    A Gradients node that has its own lines keeps them: MindSpore >= 2.3 writes the forward candidate's code
    under the node itself ("# Corresponding forward node candidate:"), and the reference output keeps those
    lines on every such node of the MindSpore 2.10 refdata IR (docs/code_mapping.md, "Differences").
    """
    forward = {node.unique_id: node for node in nodes
               if node.unique_id and not node.scope.startswith("Gradients")}
    for node in nodes:
        if node.unique_id and not node.code and node.scope.startswith("Gradients"):
            origin = forward.get(node.unique_id)
            if origin is not None:
                node.code, node.code_from = origin.code, origin.key


def parse_ir(path: str) -> IRGraph:
    """Parse a MindSpore text IR file (plain or gzip). Raises IRFormatError for anything that is not one."""
    parser = _Parser(path)
    number = 0
    try:
        with open_ir_text(path) as text:
            for number, line in enumerate(_lines(text), 1):
                if line is None:
                    raise IRFormatError(f"{path}: line {number} is longer than {LONGEST_LINE} characters, longer "
                                        "than any IR line; refused.")
                if "\x00" in line:
                    archive = " (an archive? extract the .ir file from it)" if _is_gzip(path) else ""
                    raise IRFormatError(f"{path} holds binary data, not a MindSpore text IR{archive}.")
                parser.feed(line.rstrip("\n"), number)
                if number == SNIFF_LINES and not parser.marker_seen:
                    break
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise IRFormatError(f"{path} is a damaged or truncated gzip file ({exc}).") from None
    if not parser.marker_seen:
        if number == 0:
            raise IRFormatError(f"{path} is empty, not a MindSpore text IR.")
        raise IRFormatError(f"{path} is not a MindSpore text IR: none of its first {min(number, SNIFF_LINES)} "
                            "line(s) is an '# IR entry', 'subgraph @', parameter or node line (IR files are "
                            "saved with save_graphs / MS_DEV_SAVE_GRAPHS).")
    return parser.finish(number)
