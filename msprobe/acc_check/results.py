"""The result and details CSVs of acc_check (spec §5.8 PyTorch, §4.5 MindSpore) and resuming an interrupted run
(§5.6, §4.6). The columns and cells come from the dump's backend (`backends.py`); writing and resuming are shared.

Rows are appended as whole lines and flushed after every API: the details rows of an API first, then its
result row, so a result row always means complete details. A resumed run skips the APIs of the result file
and cuts details rows of an API whose result row was never written.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re

from msprobe.acc_check.registry import MINDSPORE, TORCH
from msprobe.dump.paths import check_input_file
from msprobe.errors import MsprobeError
from msprobe.io import atomic_path
from msprobe.table.cells import column_texts
from msprobe.table.model import ResultTable
from msprobe.table.safety import check_cells

RESULT_HEADER = TORCH.result_header      # PyTorch headers (spec §5.8)
DETAILS_HEADER = TORCH.details_header
RESULT_NAME = re.compile(r"^accuracy_checking_result_(\d{14})\.csv$")
BOM = "\ufeff"


class ResumeError(MsprobeError):
    """A result CSV given to -csv_path cannot be continued."""


def _line(cells: list) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow(cells)
    return buffer.getvalue()


class ResultFiles:
    """The pair of CSV files of one run, opened for appending."""

    def __init__(self, result_path: str, details_path: str, new: bool, backend=TORCH):
        self.result_path, self.details_path = result_path, details_path
        self.backend = backend
        mode = "w" if new else "a"
        self._result = self._details = None
        try:
            self._result = open(result_path, mode, encoding="utf-8", newline="")
            self._details = open(details_path, mode, encoding="utf-8", newline="")
            if new:
                self._result.write(BOM + _line(backend.result_header))
                self._details.write(BOM + _line(backend.details_header))
                self.flush()
        except OSError:
            self.close(quiet=True)
            if new:       # a new pair that cannot be started is not left behind half-made
                for path in (result_path, details_path):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            raise

    def append(self, result) -> None:
        """The API's details rows, then its result row; a cell a spreadsheet could run as a formula is refused
        (the compare tables' check, table/safety.py) before either file is touched."""
        details = self.backend.details_rows(result)
        row = self.backend.result_row(result)
        _check_rows(details, self.backend.details_header, self.details_path)
        _check_rows([row], self.backend.result_header, self.result_path)
        text = "".join(_line(row) for row in details)
        if text:
            self._details.write(text)
            self._details.flush()
        self._result.write(_line(row))
        self._result.flush()

    def flush(self) -> None:
        self._details.flush()
        self._result.flush()

    def close(self, quiet: bool = False) -> None:
        """Close both files; `quiet`: after a failure, ignore a second one (a full disk refusing the last flush)."""
        for handle in (self._result, self._details):
            if handle is None:
                continue
            try:
                handle.close()
            except OSError:
                if not quiet:
                    raise


def _check_rows(rows: list, header: list, path: str) -> None:
    """Refuse rows (shorter ones are padded) holding a cell a spreadsheet could run as a formula."""
    if rows:
        cells = {name: column_texts([row[index] if index < len(row) else "" for row in rows])
                 for index, name in enumerate(header)}
        check_cells(ResultTable(columns=list(header), cells=cells), cells, path)


def result_path_of(output_dir: str, stamp: str, suffix: str = "") -> str:
    """accuracy_checking_result_<stamp><suffix>.csv in output_dir (suffix `_device<id>[_split<i>]` for
    multi_acc_check)."""
    return os.path.join(output_dir, f"accuracy_checking_result_{stamp}{suffix}.csv")


def details_of(result_path: str) -> str:
    """The details CSV that pairs with a result CSV."""
    directory, name = os.path.split(result_path)
    return os.path.join(directory, name.replace("_result_", "_details_", 1))


def new_files(output_dir: str, stamp: str, suffix: str = "", backend=TORCH) -> ResultFiles:
    """The pair accuracy_checking_result|details_<stamp><suffix>.csv (suffix `_device<id>` for multi_acc_check)."""
    result = result_path_of(output_dir, stamp, suffix)
    details = details_of(result)
    for path in (result, details):
        if os.path.lexists(path):
            raise MsprobeError(f"{path} already exists; not overwriting it.")
    return ResultFiles(result, details, new=True, backend=backend)


def _read_rows(path: str, header: list, what: str, backend=TORCH) -> tuple:
    """(rows, byte offset after each complete row) of a result/details CSV; ResumeError when corrupt."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise ResumeError(f"cannot read the {what} {path}: {exc.strerror}.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ResumeError(f"the {what} {path} is not a UTF-8 CSV written by acc_check.") from None
    text = text[1:] if text.startswith(BOM) else text
    lines = text.split("\r\n")
    found = next(csv.reader([lines[0]]), None) if lines else None
    if found != header:
        other = MINDSPORE if backend is TORCH else TORCH
        if found in (other.result_header, other.details_header):
            raise ResumeError(f"the {what} {path} is the result of a {other.framework} dump and this dump.json is "
                              f"a {backend.framework} dump; nothing was changed.")
        raise ResumeError(f"the {what} {path} is corrupt or not an acc_check file: its header is not "
                          f"{', '.join(header)}.")
    complete = lines[1:-1] if len(lines) > 1 else []   # the last piece has no line end (empty when complete)
    if lines[-1]:
        complete = lines[1:-1]
    rows = []
    try:
        rows = list(csv.reader(complete))
    except csv.Error as exc:
        raise ResumeError(f"the {what} {path} is corrupt ({exc}).") from None
    return rows, len(raw) - len(lines[-1].encode("utf-8"))


def recorded_rows(result_path: str, backend=TORCH) -> list:
    """The complete rows of a result CSV (a half-written last line is left out); ResumeError when it is not one of
    this backend's result files."""
    return [row for row in _read_rows(result_path, backend.result_header, "result csv", backend)[0] if row]


def concatenate(result_path: str, details_path: str, parts: list, backend=TORCH) -> None:
    """Write the pair result_path/details_path: the backend's headers, then the rows of each complete part pair
    (result path, details path) in order. Each file is written atomically, the details file first, so an existing
    result file always means a complete pair."""
    import shutil


    for target, header, index in ((details_path, backend.details_header, 1), (result_path, backend.result_header, 0)):
        with atomic_path(target) as temporary, open(temporary, "wb") as out:
            out.write((BOM + _line(header)).encode("utf-8"))
            for part in parts:
                with open(part[index], "rb") as handle:
                    handle.readline()        # the part's own header
                    shutil.copyfileobj(handle, out)


def resume_files(csv_path: str, api_names: list, suffix: str = "", backend=TORCH) -> tuple:
    """Open an interrupted run's pair of files; returns (ResultFiles, done set, timestamp). `suffix` is the
    `_device<id>` part of a multi_acc_check file name. Nothing is changed when the files are refused."""
    csv_path = check_input_file(csv_path, "result csv to resume")
    pattern = re.compile(r"^accuracy_checking_result_(\d{14})" + re.escape(suffix) + r"\.csv$")
    match = pattern.match(os.path.basename(csv_path))
    if not match:
        raise ResumeError(f"{csv_path}: please do not modify the result csv name "
                          f"(expected accuracy_checking_result_<YYYYmmddHHMMSS>{suffix}.csv).")
    details_path = details_of(csv_path)
    if not os.path.isfile(details_path) or not os.access(details_path, os.R_OK | os.W_OK):
        raise ResumeError(f"the details file {details_path} of {csv_path} is missing or not read/writable.")
    rows, result_end = _read_rows(csv_path, backend.result_header, "result csv", backend)
    done = [row[0] for row in rows if row]
    bad = [row for row in rows if len(row) < 3 or row[1] not in backend.statuses or row[2] not in backend.statuses]
    if bad:
        raise ResumeError(f"the result csv {csv_path} is corrupt: row {bad[0]!r} is not an acc_check result row.")
    known = set(api_names)
    foreign = [name for name in done if name not in known]
    if foreign:
        raise ResumeError(f"the result csv {csv_path} belongs to another dump: {len(foreign)} of its APIs "
                          f"(first: {foreign[0]}) are not in this dump.json.")
    done_set = set(done)
    details, _ = _read_rows(details_path, backend.details_header, "details csv", backend)
    # Keep the details of recorded APIs only; a run killed between an API's details and its result row leaves
    # details that the resumed run writes again.
    keep = 0
    with open(details_path, "rb") as handle:
        raw = handle.read()
    offset = len(BOM.encode("utf-8")) if raw.startswith(BOM.encode("utf-8")) else 0
    offset += raw[offset:].index(b"\r\n") + 2
    keep = offset
    for row in details:
        end = raw.index(b"\r\n", offset) + 2
        # a quoted cell may hold CR LF; advance until the row parses completely
        while next(csv.reader([raw[offset:end].decode("utf-8")]), None) != row:
            end = raw.index(b"\r\n", end) + 2
        name = row[0].split(".forward.output.")[0].split(".backward.output.")[0]
        if name in done_set:
            keep = end
        offset = end
    with open(csv_path, "r+b") as handle:
        handle.truncate(result_end)
    with open(details_path, "r+b") as handle:
        handle.truncate(keep)
    return ResultFiles(csv_path, details_path, new=False, backend=backend), done_set, match.group(1)
