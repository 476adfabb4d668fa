"""Read dump.json / debug.json, stack.json and construct.json once each, with clear errors."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import orjson

from msprobe.dump.paths import TENSOR_DIR_NAME, check_input_file
from msprobe.errors import DumpFormatError
from msprobe.log import get_logger
from msprobe.names import printable

FRAMEWORKS = ("pytorch", "mindspore", "mindtorch")

# Dumps may hold the non-standard tokens NaN, Infinity and -Infinity, which orjson refuses. They are
# rewritten to sentinel strings (decoded by the flattener) so the fast parser still reads the file. A token
# inside a JSON string would gain quotes and make the text invalid, so such a file falls back to the stdlib
# parser of the untouched bytes: the rewrite can never change what a file means.
SENTINELS = {"\x00msprobe:nan": float("nan"), "\x00msprobe:inf": float("inf"), "\x00msprobe:ninf": float("-inf")}
_REWRITES = ((b"-Infinity", b'"\\u0000msprobe:ninf"'), (b"Infinity", b'"\\u0000msprobe:inf"'),
             (b"NaN", b'"\\u0000msprobe:nan"'))
(_, _NINF_TEXT), (_, _INF_TEXT), (_, _NAN_TEXT) = _REWRITES


def json_number(value: float):
    """A float as the collector stores it: non-finite values become the sentinel strings, which
    `encode_dump_json` writes back as the NaN/Infinity/-Infinity tokens of the dump format."""
    if value != value:
        return "\x00msprobe:nan"
    if value in (math.inf, -math.inf):
        return "\x00msprobe:inf" if value > 0 else "\x00msprobe:ninf"
    return value


def encode_dump_json(content) -> bytes:
    """JSON text of a dump file (orjson, indented), with the sentinels of json_number as bare tokens."""
    raw = orjson.dumps(content, option=orjson.OPT_INDENT_2)
    if b"\\u0000msprobe:" not in raw:
        return raw
    for token, sentinel in _REWRITES:
        raw = raw.replace(sentinel, token)
    return raw


def _without_non_finite_tokens(raw: bytes) -> bytes | None:
    """raw with every NaN, Infinity and -Infinity token replaced by its sentinel string (what the replacements of
    _REWRITES, one after another, would give), made in one copy; None when there is none."""
    spots = []
    for token, sentinel in ((b"Infinity", _INF_TEXT), (b"NaN", _NAN_TEXT)):
        at = raw.find(token)
        while at >= 0:
            spots.append((at, at + len(token), sentinel))
            at = raw.find(token, at + len(token))
    if not spots:
        return None
    spots.sort()
    view = memoryview(raw)
    pieces = []
    done = 0
    for start, end, sentinel in spots:
        if sentinel is _INF_TEXT and start > done and raw[start - 1] == 0x2D:     # -Infinity
            start, sentinel = start - 1, _NINF_TEXT
        pieces += (view[done:start], sentinel)
        done = end
    pieces.append(view[done:])
    return b"".join(pieces)


_WIDE_MARKS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
               (b"\xfe\xff", "UTF-16"))   # byte order marks of the encodings JSON files may not use
PROBE_BYTES = 4096       # the ends of a JSON file looked at before the file is read


def _check_ends(path: str) -> None:
    """Refuse, before reading it whole, a file that cannot be a JSON dump: NUL bytes at either end (a sparse or
    damaged file) and, for a file larger than the two ends, no '{' or '[' at the start or no '}' or ']' at the
    end (a file cut while it was written)."""
    with open(path, "rb") as handle:
        head = handle.read(PROBE_BYTES)
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(size - PROBE_BYTES, len(head)))
        tail = handle.read()
    for mark, encoding in _WIDE_MARKS:
        if head.startswith(mark):
            raise DumpFormatError(f"{path} is not valid JSON: it starts with the byte order mark of {encoding} text "
                                  "(JSON files are UTF-8: save it as UTF-8).")
    if b"\x00" in head or b"\x00" in tail:
        raise DumpFormatError(f"{path} is not valid JSON: it holds NUL bytes (a sparse or damaged file).")
    if size <= 2 * PROBE_BYTES:
        return                  # small: parsed at once, with the parser's own errors
    start = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if start[:1] not in (b"{", b"["):
        raise DumpFormatError(f"{path} is not a JSON object or array: it starts with {start[:20]!r}.")
    end = tail.rstrip()
    if end[-1:] not in (b"}", b"]"):
        raise DumpFormatError(f"{path} is not valid JSON: it ends with {end[-20:]!r}, not '}}' or ']' (a file cut "
                              "while it was written or copied?).")


def _json_int(text: str):
    """A JSON integer; one too long for Python's int() (4300 digits, far beyond the float range) is the infinity
    of its sign, as every integer beyond the float range is for the statistics (cells.stat_number)."""
    return int(text) if len(text) < 4300 else float(text)


def load_json(path: str, what: str = "json file"):
    """Parse a JSON file (orjson; the stdlib parser for NaN/Infinity tokens that orjson refuses). Its two ends
    are checked first, so that a file which cannot be JSON is refused without being read."""
    path = check_input_file(path, what)
    try:
        _check_ends(path)
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise DumpFormatError(f"cannot read {path}: {exc.strerror}.") from None
    if not raw.strip():
        raise DumpFormatError(f"{path} is empty.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    rewritten = _without_non_finite_tokens(raw)
    if rewritten is not None:
        del raw  # only one copy of a large file in memory; the rare fallback below reads it again
        try:
            return orjson.loads(rewritten)
        except orjson.JSONDecodeError:
            del rewritten
        with open(path, "rb") as handle:
            raw = handle.read()
    try:
        return json.loads(raw, parse_int=_json_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DumpFormatError(f"{path} is not valid JSON ({exc}).") from None
    except RecursionError:
        raise DumpFormatError(f"{path} is nested too deeply (at most 400 levels are supported).") from None


def load_json_object(path: str, what: str, error: type = DumpFormatError) -> tuple[str, dict]:
    """(checked absolute path, content) of a JSON file that must hold an object (a configuration), read by the
    rule of dump files (load_json: a byte order mark, NaN, nesting); bad content raises `error` with one line
    naming the file as `what`."""
    path = check_input_file(path, what)
    try:
        content = load_json(path, what)
    except DumpFormatError as exc:
        raise error(f"{what} {exc}") from None
    if not isinstance(content, dict):
        raise error(f"{what} {path} must be a JSON object.")
    return path, content


@dataclass(frozen=True)
class Dump:
    """One side of a compare: the parsed dump file and what lies beside it."""

    path: str                      # absolute path of dump.json / debug.json
    task: str                      # "statistics" | "tensor" | ...
    level: str
    framework: str                 # "pytorch" | "mindspore" | "mindtorch"
    data: dict                     # entry name -> entry body, in call order
    is_debug: bool                 # debug.json of the single-point save tool
    stack: dict | None = None      # entry name -> list of stack lines; None when no stack.json
    construct: dict | None = None  # entry name -> parent; None when no construct.json
    extras: dict = field(default_factory=dict)
    incomplete: str | None = None  # why the step of this dump did not finish ("incomplete" of the collector)

    @property
    def directory(self) -> str:
        return os.path.dirname(self.path)

    @property
    def tensor_dir(self) -> str:
        return os.path.join(self.directory, TENSOR_DIR_NAME)


_TYPE_PREFIXES = (("mindspore.", "mindspore"), ("torch.", "pytorch"))


def infer_framework(data: dict) -> str | None:
    """The framework of a dump.json written without 'framework' (older collectors): the first record whose
    'type' names a MindSpore or PyTorch class decides (spec compare.md §3.8); None when no record does."""
    pending = list(data.values())
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, str):
                for prefix, framework in _TYPE_PREFIXES:
                    if kind.startswith(prefix):
                        return framework
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return None


def read_dump(path: str, side: str, with_stack: bool = True, with_construct: bool = False,
              stack_path: str | None = None) -> Dump:
    """Read a dump.json or debug.json and, when present beside it, stack.json (and construct.json); with
    stack_path, that stack file instead of the one beside the dump (the 1.x compare.json's stack_path)."""
    what = f"{side} dump file"
    content = load_json(path, what)
    if not isinstance(content, dict):
        raise DumpFormatError(f"{path} is not a msprobe dump: the top level must be an object "
                              f"with 'task' and 'data'.")
    if "data" not in content:
        raise DumpFormatError(f"{path} is not a msprobe dump: missing 'data'.")
    if not isinstance(content["data"], dict):
        raise DumpFormatError(f"{path}: 'data' must be an object of entries, got {type(content['data']).__name__}.")
    task = content.get("task")
    if not task or not isinstance(task, str):
        raise DumpFormatError(f"{path}: 'task' is missing or empty.")
    framework = content.get("framework")
    if not framework:
        framework = infer_framework(content["data"])
        if framework is None:
            get_logger().warning("%s has no 'framework' and no typed tensor; assuming pytorch.", path)
            framework = "pytorch"
    if framework not in FRAMEWORKS:
        raise DumpFormatError(f"{path}: unknown framework {framework!r} (expected one of {', '.join(FRAMEWORKS)}).")
    level = content.get("level") or ""
    is_debug = os.path.basename(path) == "debug.json" or level == "debug"
    directory = os.path.dirname(os.path.abspath(path))
    stack = None
    construct = None
    if with_stack and (stack_path or os.path.lexists(os.path.join(directory, "stack.json"))):
        stack = read_stack(stack_path or os.path.join(directory, "stack.json"))
    construct_path = os.path.join(directory, "construct.json")
    if with_construct and os.path.lexists(construct_path):
        construct = read_construct(construct_path)
    incomplete = content.get("incomplete")
    if incomplete is not None:
        incomplete = str(incomplete)
        get_logger().warning("%s is the dump of a step that did not finish (%s): its entries end where the step "
                             "stopped, so the rows after that have no partner.", printable(path), printable(incomplete))
    return Dump(path=os.path.abspath(path), task=task, level=str(level), framework=framework,
                data=content["data"], is_debug=is_debug, stack=stack, construct=construct, incomplete=incomplete)


def read_stack(path: str) -> dict:
    """stack.json in the grouped 26.x format ({"0": [[entries], [lines]]}) or the older per-entry format."""
    content = load_json(path, "stack file")
    if not isinstance(content, dict):
        raise DumpFormatError(f"The format of {path} is incorrect: the outermost layer must be an object.")
    stacks: dict[str, list] = {}
    if content.get("0"):
        for group in content.values():
            if (not isinstance(group, list) or len(group) != 2 or not isinstance(group[0], list)
                    or not isinstance(group[1], list)):
                continue  # malformed groups are skipped
            lines = _checked_lines(group[1], path)
            for entry in group[0]:
                if isinstance(entry, str):
                    stacks[entry] = lines
        return stacks
    for entry, lines in content.items():
        if not isinstance(lines, list):
            raise DumpFormatError(f"{path}: the stack of {entry} must be a list of lines.")
        stacks[entry] = _checked_lines(lines, path, entry)
    return stacks


def _checked_lines(lines: list, path: str, entry: str = "") -> list:
    """Stack lines must be strings. Their text is not refused here: a line such as `print("loss %s;%s" % x)` is
    benign, and a stack reaches a spreadsheet only in the NPU_Stack_Info cells of `compare -s`, which the writers
    check as every written cell (table/safety.py)."""
    for line in lines:
        if not isinstance(line, str):
            raise DumpFormatError(f"{path}: stack lines must be strings{' (entry ' + entry + ')' if entry else ''}.")
    return lines


def read_construct(path: str) -> dict:
    content = load_json(path, "construct file")
    if not isinstance(content, dict):
        raise DumpFormatError(f"The format of {path} is incorrect: the outermost layer must be an object.")
    return content
