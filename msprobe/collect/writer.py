"""The crash-safe writer of one step: dump.json and construct.json are streamed into temporary files as their
entries complete (memory stays bounded however long the step), stack.json is kept in memory (one group per call
site), and close() turns them into the final files at once. Whatever stopped the step, close() writes a valid
dump of everything recorded before, marked "incomplete" with the reason when the step did not finish. A failed
write (a full disk) is logged once; the entries written until then are kept and the dump says what was lost.
Nothing here raises into the caller but save_tensor, whose caller marks the record."""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import re
import threading

import orjson

from msprobe.collect.guard import ErrorLog, one_line
from msprobe.collect.paths import tensor_file_name
from msprobe.dump.reader import encode_dump_json
from msprobe.errors import os_error_text
from msprobe.io import new_temporary, remove_temporaries

FLUSH_BYTES = 1 << 20         # encoded entries are written in pieces of about this size
TENSOR_DIR = "dump_tensor_data"
_MEMBER_INDENT = b"\n    "    # entries of "data" are members of a member: 4 spaces
_SURROGATE = re.compile("[\ud800-\udfff]")
# the calls that write and allocate the streamed files (tests put a full disk here)
_write = os.write
_allocate = getattr(os, "posix_fallocate", None)
_NO_ALLOCATION = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def _spell_surrogate(match: re.Match) -> str:
    """A lone surrogate as text: \\xNN for a byte a file name held that was not UTF-8 (Python's surrogateescape),
    \\uNNNN for any other."""
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def text_of(value: str) -> str:
    """`value` with lone surrogates spelled as text, so that it can be written as UTF-8."""
    return _SURROGATE.sub(_spell_surrogate, value) if _SURROGATE.search(value) else value


def _plain(value):
    if isinstance(value, str):
        return text_of(value)
    if isinstance(value, dict):
        return {text_of(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def encode(value) -> bytes:
    """JSON of a dump value, indented by 2 (orjson), with the dump format's NaN/Infinity tokens. What orjson
    cannot encode is spelled as the reference spells it or as text: an int beyond 64 bits as its exact JSON
    number, a lone surrogate as \\xNN / \\uNNNN, any other object as its str()."""
    try:
        return encode_dump_json(value)
    except TypeError:
        pass
    raw = json.dumps(_plain(value), indent=2, ensure_ascii=False, default=lambda v: text_of(str(v)))
    return encode_dump_json(orjson.Fragment(raw.encode("utf-8")))


class _Members:
    """One JSON object written member by member into a temporary file beside `path`. Space is allocated before it
    is written, RESERVE bytes more than needed: when the disk fills up the allocation fails first, nothing more is
    written, and the closing part still fits. A failed write goes back to the end of the last member written
    whole."""

    RESERVE = 1 << 16

    def __init__(self, path: str, head: bytes, indent: bytes, members: int = 0, copy_from: int = 0):
        self.path = path
        self.head = head
        self.indent = indent
        self.members = self.members_on_disk = members
        self.dropped = 0                 # members a failed write took back
        self.made: list = []
        self.temporary = new_temporary(path, self.made)
        self.fd = os.open(self.temporary, os.O_WRONLY)
        self.written = 0                 # bytes on disk, always whole members
        self.buffer = bytearray()
        self.can_allocate = _allocate is not None
        if copy_from:                    # continue a closed file: everything before its closing part
            with open(path, "rb") as handle:
                while self.written < copy_from:
                    chunk = handle.read(min(FLUSH_BYTES, copy_from - self.written))
                    if not chunk:
                        raise OSError(f"{path} is shorter than when it was written")
                    self.buffer += chunk
                    self.flush()
        else:
            self.buffer += head
        self._reserve(len(self.buffer))

    def _reserve(self, size: int) -> None:
        """Allocate the next `size` bytes and RESERVE more; ENOSPC (and the like) raises."""
        if not self.can_allocate or _allocate is None:
            return
        try:
            _allocate(self.fd, self.written, size + self.RESERVE)
        except OSError as exc:
            if exc.errno not in _NO_ALLOCATION:
                raise
            self.can_allocate = False        # this file system cannot: plain writes from now on

    def add(self, key: bytes, value: bytes) -> None:
        self.buffer += b"," if self.members else b""
        self.buffer += self.indent + key + b": " + value.replace(b"\n", self.indent)
        self.members += 1

    def flush(self, reserve: bool = True) -> None:
        data = memoryview(bytes(self.buffer))
        self.buffer.clear()
        done = 0
        try:
            if reserve:
                self._reserve(len(data))
            while done < len(data):
                done += _write(self.fd, data[done:])
        except BaseException:
            with contextlib.suppress(OSError):
                os.lseek(self.fd, self.written, os.SEEK_SET)
            self.dropped += self.members - self.members_on_disk
            self.members = self.members_on_disk
            raise
        self.written += done
        self.members_on_disk = self.members

    def finish(self, tail: bytes) -> int:
        """Write the closing part (into the reserved space), rename over `path`; the size before the tail (where
        a continuation starts)."""
        if not self.written and not self.buffer:
            self.buffer += self.head                 # the first write failed: at least an empty object
        size = self.written + len(self.buffer)
        self.buffer += tail
        self.flush(reserve=False)                    # into the space kept for it
        os.ftruncate(self.fd, self.written)          # the rest of the reservation, a failed write's remains
        os.close(self.fd)
        self.fd = None
        os.chmod(self.temporary, 0o640)
        os.replace(self.temporary, self.path)
        self.made.clear()
        return size

    def discard(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        remove_temporaries(self.made)


class _Critical:
    """The writer's lock. SIGTERM's handler runs in the main thread between two bytecodes, possibly while that
    thread holds this lock: call_soon() then defers its job until the lock is left. `owner` is set only after
    acquiring (a handler in between sees no owner, and re-enters the RLock on a writer not changed yet)."""

    __slots__ = ("lock", "owner", "deferred")

    def __init__(self):
        self.lock = threading.RLock()
        self.owner = None
        self.deferred: list = []

    def __enter__(self):
        self.lock.acquire()
        self.owner = threading.get_ident()

    def __exit__(self, *_exc):
        self.owner = None
        self.lock.release()
        if self.deferred:
            work, self.deferred = self.deferred, []
            for job in work:
                job()


class Slot:
    """A position in dump.json taken before the entry's data is complete (StepWriter.reserve)."""

    __slots__ = ("name", "body", "ready")

    def __init__(self, name: str, body: dict, ready: bool):
        self.name = name
        self.body = body
        self.ready = ready


class StepWriter:
    """Writes the steps of one process: open(directory) starts (or continues) a step, add/reserve/complete stream
    its entries in call order, add_construct its parents, close(incomplete) ends it.

    `save(tensor, path)` is the framework's tensor writer (torch.save, numpy.save ...) and `suffix` its file
    suffix (".pt", ".npy"). Thread-safe; a SIGTERM handler uses call_soon() so that it never runs inside."""

    def __init__(self, framework: str, task: str, level: str, save=None, suffix: str = ".pt",
                 errors: ErrorLog | None = None):
        self.framework = framework
        self.task = task
        self.level = level
        self.save = save
        self.suffix = suffix
        self.errors = errors or ErrorLog()
        self.directory: str | None = None
        self._critical = _Critical()
        self._dump: _Members | None = None
        self._construct: _Members | None = None
        self._closed: dict = {}          # file name -> (size before the tail, members) of the closed step files
        self._queue: collections.deque = collections.deque()
        self._stacks: dict = {}          # stack lines -> entry names (stack.json groups, in first-seen order)
        self._tensor_dir_made = False
        self.failure: str | None = None  # why writing stopped (a full disk ...)
        self.lost = 0                    # entries not written since then

    @property
    def entries(self) -> int:
        """The entries of the step's dump.json as last closed."""
        return self._closed.get("dump.json", (0, 0))[1]

    # ------------------------------------------------------------------ critical sections
    def forget(self) -> None:
        """In a forked child (os.fork, a DataLoader worker): drop the step without touching its files, which
        belong to the parent (the open file descriptors are the parent's too)."""
        self._critical = _Critical()              # the parent may have held the lock when it forked
        self._dump = self._construct = None
        self._queue.clear()
        self._closed = {}
        self.directory = None

    def call_soon(self, job) -> None:
        """Run `job` now, or, when this thread is inside the writer (a signal handler interrupted it), as soon
        as it leaves."""
        if self._critical.owner == threading.get_ident():
            self._critical.deferred.append(job)
        else:
            job()

    # ------------------------------------------------------------------ step
    @property
    def tensor_dir(self) -> str | None:
        return os.path.join(self.directory, TENSOR_DIR) if self.directory else None

    @property
    def is_open(self) -> bool:
        return self._dump is not None

    def open(self, directory: str) -> None:
        """Start writing a step into `directory`, or continue the one closed there (start() after stop() within
        one step adds to the same files)."""
        with self._critical:
            if self._dump is not None:
                return
            if directory != self.directory:
                self.directory = directory
                self._closed = {}
                self._stacks = {}
                self._tensor_dir_made = False
                self.failure = None
                self.lost = 0
            try:
                os.makedirs(directory, exist_ok=True)
                head = encode({"task": self.task, "level": self.level, "framework": self.framework,
                               "dump_data_dir": self.tensor_dir if self.task == "tensor" else None})
                head = head[:head.rindex(b"}")].rstrip() + b',\n  "data": {'
                size, members = self._closed.get("dump.json", (0, 0))
                self._dump = _Members(os.path.join(directory, "dump.json"), head, _MEMBER_INDENT, members, size)
                if self.level != "L1":
                    size, members = self._closed.get("construct.json", (0, 0))
                    self._construct = _Members(os.path.join(directory, "construct.json"), b"{", b"\n  ", members,
                                               size)
            except Exception as exc:  # noqa: BLE001 - recording goes on in memory-free mode: nothing is kept
                self._discard()
                self._fail(exc, "opening")

    def close(self, incomplete: str | None = None) -> str | None:
        """Write the entries still waiting, then construct.json, stack.json and dump.json (marked "incomplete"
        with the reason when the step did not finish, or when writing failed). The dump.json path, or None."""
        with self._critical:
            if self._dump is None:
                return None
            while self._queue:
                done = self._queue.popleft()
                self._emit(done.name, done.body)
            self._flush()
            directory = self.directory
            if self.level == "L1":
                self._side_file("construct.json", lambda: _write_file(os.path.join(directory, "construct.json"),
                                                                      b"{}"))
            elif self._construct is not None:
                construct, self._construct = self._construct, None
                self._side_file("construct.json", lambda: self._closed.__setitem__(
                    "construct.json", (construct.finish(b"\n}"), construct.members)), construct.discard)
            stack = {str(i): [names, list(lines)] for i, (lines, names) in enumerate(self._stacks.items())}
            self._side_file("stack.json", lambda: _write_file(os.path.join(directory, "stack.json"), encode(stack)))
            if self.failure is not None:
                self.lost += dump.dropped if (dump := self._dump) is not None else 0
                lost = f"; {self.lost} entries from there on were not written" if self.lost else ""
                incomplete = f"{incomplete}; {self.failure}{lost}" if incomplete else f"{self.failure}{lost}"
            tail = b"\n  }" + (b',\n  "incomplete": ' + encode(incomplete) if incomplete else b"") + b"\n}"
            dump, self._dump = self._dump, None
            try:
                self._closed["dump.json"] = (dump.finish(tail), dump.members)
                return os.path.join(directory, "dump.json")
            except Exception as exc:  # noqa: BLE001 - the training goes on without this step's dump.json
                if not self._folder_gone(exc):
                    self.errors.once(_failure_key(exc), "writing %s failed (%s); this step's dump.json is not "
                                     "written and training continues", directory, _why(exc))
                dump.discard()
                self._closed = {}
                return None

    def _side_file(self, name: str, write, discard=None) -> None:
        """construct.json and stack.json: a failure is logged once and dump.json is still written."""
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - dump.json matters more
            if not self._folder_gone(exc):
                self.errors.once(_failure_key(exc), "writing %s of %s failed (%s); dump.json is still written",
                                 name, self.directory, _why(exc))
            if discard is not None:
                discard()

    def _folder_gone(self, exc: BaseException) -> bool:
        """The step's folder was removed while the step was recorded: logged once as that (no file of the step
        can be written there), not as the failure of each file."""
        if os.path.isdir(self.directory):
            return False
        self.errors.once(("folder gone", self.directory), "the dump folder %s was removed while the step was "
                         "recorded (%s); none of this step's files is written and training continues",
                         self.directory, _why(exc))
        return True

    def _discard(self) -> None:
        for stream in (self._dump, self._construct):
            if stream is not None:
                stream.discard()
        self._dump = self._construct = None
        self._queue.clear()
        self._closed = {}

    # ------------------------------------------------------------------ entries
    def add(self, name: str, body: dict, stack: tuple | None = None) -> None:
        """A complete entry, in call order."""
        with self._critical:
            if self._dump is None:
                return
            if stack is not None:
                self._stacks.setdefault(stack, []).append(name)
            if self._queue:
                self._queue.append(Slot(name, body, True))
            else:
                self._emit(name, body)

    def reserve(self, name: str, body: dict) -> Slot:
        """Take the entry's position now; its body is written once complete() is called (or at close())."""
        slot = Slot(name, body, False)
        with self._critical:
            if self._dump is not None:
                self._queue.append(slot)
        return slot

    def complete(self, slot: Slot) -> None:
        with self._critical:
            slot.ready = True
            while self._queue and self._queue[0].ready:
                done = self._queue.popleft()
                self._emit(done.name, done.body)

    def add_construct(self, name: str, parent) -> None:
        """construct.json: the parent module (or phase) of an entry; nothing at level L1."""
        with self._critical:
            if self._construct is None or self.failure is not None:
                return
            self._construct.add(encode(name), encode(parent))
            if len(self._construct.buffer) >= FLUSH_BYTES:
                self._flush()

    def _emit(self, name: str, body: dict) -> None:
        if self.failure is not None:
            self.lost += 1
            return
        try:
            value = encode(body)
        except Exception as exc:  # noqa: BLE001 - one entry that cannot be encoded at all
            value = encode({"dump_error": f"writing: {one_line(exc)}"})
            self.errors.failed("writing", name, exc)
        self._dump.add(encode(name), value)
        if len(self._dump.buffer) >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self.failure is not None:
            return
        for stream in (self._dump, self._construct):
            if stream is None or not stream.buffer:
                continue
            try:
                stream.flush()
            except OSError as exc:
                self._fail(exc, "writing")
                return

    def _fail(self, exc: BaseException, what: str) -> None:
        entries = self._dump.members if self._dump is not None else 0
        self.failure = f"{what} {self.directory} failed after {entries} entries ({_why(exc)})"
        self.errors.once(_failure_key(exc), "%s; later entries of this step are not written and training "
                         "continues", self.failure)

    # ------------------------------------------------------------------ tensors
    def save_tensor(self, name: str, tensor) -> str:
        """Save `tensor` as the file named after `name` (escaped, shortened when too long) in dump_tensor_data;
        its data_name. Raises what the save raised (the caller marks the record)."""
        directory = self.tensor_dir
        if directory is None or self.save is None:
            raise RuntimeError("no step is being written")
        if not self._tensor_dir_made:
            os.makedirs(directory, exist_ok=True)
            self._tensor_dir_made = True
        data_name = tensor_file_name(name, self.suffix)
        path = os.path.join(directory, data_name)
        made: list = []
        try:
            temporary = new_temporary(path, made)
            self.save(tensor, temporary)
            os.replace(temporary, path)
            made.clear()
        finally:
            remove_temporaries(made)
        return data_name


def _failure_key(exc: BaseException) -> tuple:
    """One log line per kind of write failure (a full disk fails every file of every later step)."""
    return "write", type(exc).__name__, getattr(exc, "errno", None)


def _why(exc: BaseException) -> str:
    return os_error_text(exc) if isinstance(exc, OSError) else one_line(exc)


def _write_file(path: str, content: bytes) -> None:
    made: list = []
    try:
        temporary = new_temporary(path, made)
        with open(temporary, "wb") as handle:
            handle.write(content)
        os.chmod(temporary, 0o640)
        os.replace(temporary, path)
        made.clear()
    finally:
        remove_temporaries(made)
