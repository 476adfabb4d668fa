"""The crash-safe step writer (msprobe.collect.writer), without any framework: entries streamed in call order,
reserved positions, a step continued after close(), the "incomplete" marker, a full disk, values orjson cannot
encode, and safe tensor file names."""

from __future__ import annotations

import errno
import json
import os

import numpy as np

import msprobe.collect.writer as writer_module
from msprobe.collect.guard import ErrorLog
from msprobe.collect.paths import escape_file_name, step_directory, tensor_file_name
from msprobe.collect.writer import StepWriter, encode
from msprobe.dump.reader import json_number, read_dump

from conftest import FullDisk


def new_writer(task="statistics", level="mix", save=None, suffix=".npy") -> StepWriter:
    return StepWriter("mindspore", task, level, save=save, suffix=suffix, errors=ErrorLog())


def read(directory) -> dict:
    return json.loads((directory / "dump.json").read_text())


def test_entries_stream_in_call_order_and_reserved_positions_wait(tmp_path):
    writer = new_writer()
    writer.open(str(tmp_path))
    writer.add("A.0.forward", {"input_args": [{"type": "int", "value": 1}]}, ("File a.py, line 1",))
    slot = writer.reserve("Cell.x.backward.0", {})
    writer.add("B.0.forward", {"output": [None]}, ("File a.py, line 1",))
    writer.add_construct("A.0.forward", "Cell.x.forward.0")
    on_disk = writer._dump.written + len(writer._dump.buffer)
    slot.body["input"] = [{"type": "float", "value": json_number(float("nan"))}]
    writer.complete(slot)
    assert writer._dump.written + len(writer._dump.buffer) > on_disk        # B was held back until then
    assert writer.close() == str(tmp_path / "dump.json")
    dump = read(tmp_path)
    assert list(dump) == ["task", "level", "framework", "dump_data_dir", "data"]
    assert (dump["task"], dump["framework"], dump["dump_data_dir"]) == ("statistics", "mindspore", None)
    assert list(dump["data"]) == ["A.0.forward", "Cell.x.backward.0", "B.0.forward"]
    assert b"NaN" in (tmp_path / "dump.json").read_bytes()                 # the dump format's token
    assert json.loads((tmp_path / "stack.json").read_text()) == {
        "0": [["A.0.forward", "B.0.forward"], ["File a.py, line 1"]]}
    assert json.loads((tmp_path / "construct.json").read_text()) == {"A.0.forward": "Cell.x.forward.0"}
    assert sorted(os.listdir(tmp_path)) == ["construct.json", "dump.json", "stack.json"]   # no temporary left


def test_entries_reach_the_disk_while_the_step_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "FLUSH_BYTES", 1000)
    writer = new_writer(level="L1")
    writer.open(str(tmp_path))
    body = {"output": [{"type": "str", "value": "x" * 200}]}
    for i in range(100):
        writer.add(f"A.{i}.forward", body)
    assert writer._dump.written > 20_000 and len(writer._dump.buffer) < 1000    # memory stays bounded
    writer.close()
    assert len(read(tmp_path)["data"]) == 100
    assert json.loads((tmp_path / "construct.json").read_text()) == {}         # level L1


def test_a_step_continued_after_close_keeps_its_entries(tmp_path):
    writer = new_writer()
    writer.open(str(tmp_path))
    writer.add("A.0.forward", {})
    writer.add_construct("A.0.forward", None)
    writer.close("the step raised KeyError: 'x'")
    assert read(tmp_path)["incomplete"] == "the step raised KeyError: 'x'"
    writer.open(str(tmp_path))              # start() again in the same step
    writer.add("A.1.forward", {})
    writer.add_construct("A.1.forward", None)
    writer.close()
    dump = read(tmp_path)
    assert list(dump["data"]) == ["A.0.forward", "A.1.forward"] and "incomplete" not in dump
    assert list(json.loads((tmp_path / "construct.json").read_text())) == ["A.0.forward", "A.1.forward"]
    writer.open(str(tmp_path / "next"))     # the next step: a new folder, nothing carried over
    writer.close()
    assert read(tmp_path / "next")["data"] == {}


def test_an_unfinished_step_is_marked_and_read_as_such(tmp_path, msprobe_records):
    writer = new_writer()
    writer.open(str(tmp_path))
    writer.add("Tensor.add.0.forward", {"output": [{"type": "int", "value": 3}]})
    slot = writer.reserve("Cell.x.backward.0", {"input": [None]})       # never completed: written as it is
    writer.close("the process received SIGTERM before stop() was called")
    dump = read_dump(str(tmp_path / "dump.json"), "target")
    assert dump.incomplete == "the process received SIGTERM before stop() was called"
    assert list(dump.data) == ["Tensor.add.0.forward", "Cell.x.backward.0"] and slot.body == {"input": [None]}
    assert any("did not finish" in r.getMessage() and "SIGTERM" in r.getMessage() for r in msprobe_records)


def test_a_full_disk_keeps_what_was_written_and_says_what_was_lost(tmp_path, monkeypatch, msprobe_records):
    monkeypatch.setattr(writer_module, "FLUSH_BYTES", 1)      # every entry is written at once
    monkeypatch.setattr(writer_module._Members, "RESERVE", 512)
    writer = new_writer()
    writer.open(str(tmp_path))
    disk = FullDisk(monkeypatch, free=3000)
    for i in range(40):
        writer.add(f"A.{i}.forward", {"output": [{"type": "str", "value": "y" * 100}]})
        writer.add_construct(f"A.{i}.forward", None)
    assert disk.refused
    assert writer.close() is not None           # the closing part goes into the space kept allocated for it
    dump = read(tmp_path)
    kept = len(dump["data"])
    assert 0 < kept < 40 and list(dump["data"]) == [f"A.{i}.forward" for i in range(kept)]
    assert "No space left on device" in dump["incomplete"]
    assert f"failed after {kept} entries" in dump["incomplete"]
    assert f"{40 - kept} entries from there on were not written" in dump["incomplete"]
    assert sum("No space left on device" in r.getMessage() for r in msprobe_records) == 1   # logged once
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp")] == []


def test_without_allocation_ahead_a_full_disk_loses_the_step_quietly(tmp_path, monkeypatch, msprobe_records):
    """Where the file system cannot allocate ahead, the closing part may not fit: nothing half-written is left,
    close() does not raise, the log says why."""
    writer = new_writer(level="L1")
    writer.open(str(tmp_path))
    writer.add("A.0.forward", {})
    monkeypatch.setattr(writer_module, "_allocate", None)
    monkeypatch.setattr(writer_module, "_write", lambda fd, data: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    assert writer.close() is None
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp") or n == "dump.json"] == []
    assert sum("No space left on device" in r.getMessage() for r in msprobe_records) == 1


def test_values_orjson_cannot_encode_are_spelled_as_the_reference_or_as_text(tmp_path):
    writer = new_writer(level="L1")
    writer.open(str(tmp_path))
    writer.add("Functional.pad.0.forward", {"input_kwargs": {"value": {"type": "int", "value": 2 ** 70}}},
               ("File /data/caf\udce9/train.py, line 3, in <module>",))
    writer.add("Module.a/b\udcff.forward.0", {"output": [{"type": "str", "value": "\ud800 lone"}]})
    writer.close()
    raw = (tmp_path / "dump.json").read_bytes()
    assert b'"value": 1180591620717411303424' in raw                       # the exact integer, like the reference
    data = json.loads(raw)["data"]
    assert list(data) == ["Functional.pad.0.forward", "Module.a/b\\xff.forward.0"]
    assert data["Module.a/b\\xff.forward.0"]["output"][0]["value"] == "\\ud800 lone"
    stack = json.loads((tmp_path / "stack.json").read_text())
    assert stack["0"][1] == ["File /data/caf\\xe9/train.py, line 3, in <module>"]
    assert read_dump(str(tmp_path / "dump.json"), "target").data["Functional.pad.0.forward"]   # our reader too
    assert encode({"x": object()}).startswith(b'{\n  "x": "<object object')


def test_tensor_files_are_saved_under_safe_names(tmp_path):
    writer = new_writer(task="tensor", save=lambda array, path: np.save(open(path, "wb"), array))
    writer.open(str(tmp_path))
    names = [writer.save_tensor("Cell.a.forward.0.output.0.loss/ce", np.arange(3)),
             writer.save_tensor("Cell." + "x" * 300 + ".forward.0.output.0", np.ones(2)),
             writer.save_tensor("Cell." + "x" * 300 + ".forward.0.output.1", np.ones(2))]
    writer.close()
    assert names[0] == "Cell.a.forward.0.output.0.loss%2Fce.npy"
    assert all(len(n.encode()) <= 255 and n.endswith(".npy") for n in names) and names[1] != names[2]
    saved = sorted(os.listdir(tmp_path / "dump_tensor_data"))
    assert saved == sorted(names)
    assert np.load(tmp_path / "dump_tensor_data" / names[0]).tolist() == [0, 1, 2]
    assert read(tmp_path)["dump_data_dir"] == str(tmp_path / "dump_tensor_data")


def test_file_name_rule():
    assert escape_file_name("a/b\\c%d\x00e\x1b\ud800\udce9") == "a%2Fb%5Cc%25d%00e%1B%ED%A0%80%ED%B3%A9"
    assert escape_file_name("..") == "%2E%2E" and escape_file_name("Module.a.b") == "Module.a.b"
    long = "é" * 200                                   # 400 bytes: cut at a character boundary, then the hash
    name = tensor_file_name(long, ".pt")
    assert len(name.encode()) <= 255 and name.startswith("é" * 50) and "~" in name and name.endswith(".pt")
    assert tensor_file_name(long + "x") != name
    assert step_directory("/d", 3, 1) == "/d/step3/rank1"
    assert step_directory("/d", 0, None, pid=42) == "/d/step0/proc42"


def test_writing_after_close_or_before_open_is_ignored(tmp_path):
    writer = new_writer()
    writer.add("A.0.forward", {})
    writer.add_construct("A.0.forward", None)
    writer.complete(writer.reserve("B", {}))
    assert writer.close() is None and os.listdir(tmp_path) == []


def test_a_step_folder_removed_mid_step_is_said_so_once(tmp_path, msprobe_records):
    """The folder deleted while the step runs: the log said "writing construct.json ... failed; dump.json is still
    written", and nothing was (dump.json's own failure was the same kind, so it was not logged)."""
    import shutil

    folder = tmp_path / "step0" / "proc1"
    folder.mkdir(parents=True)
    writer = new_writer()
    writer.open(str(folder))
    writer.add("A.0.forward", {"output": [None]}, ("File a.py, line 1",))
    writer.add_construct("A.0.forward", None)
    shutil.rmtree(tmp_path / "step0")
    assert writer.close() is None
    messages = [r.getMessage() for r in msprobe_records]
    assert not any("still written" in m for m in messages), messages
    assert sum(f"the dump folder {folder} was removed while the step was recorded" in m and
               "none of this step's files is written" in m for m in messages) == 1, messages
    assert not (tmp_path / "step0").exists()
