"""acc_check and op_generate on hostile input (issue 18), each case in-process and as a subprocess: a dump key that
tries to inject code into a generated script, pickles in tensor files, APIs that touch files, outputs that would
replace an input, shapes that would exhaust the memory, NaN/Infinity sentinels, and outputs that cannot be written
(full disk, read-only directory, name too long)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_bad_input import Run, error_lines, run_cli

from conftest import FIXTURES, read_csv

HERE = Path(__file__).resolve().parent
L1 = FIXTURES / "stats_L1_step0" / "target" / "dump.json"
# the same run in this process and as `python -m msprobe` in a fresh one (slow: an interpreter start-up each)
VIA = pytest.mark.parametrize("via", ["inproc", pytest.param("subprocess", marks=pytest.mark.slow)])
SCRIPT_TIMEOUT = 120


def assert_error(run: Run, command: str, *words: str, code: int = 1) -> str:
    """Exit `code`, one stderr line `msprobe <command>: error: ...` holding every word, no traceback."""
    assert "Traceback" not in run.err + run.out, run.err
    lines = error_lines(run.err)
    assert len(lines) == 1, run.err
    assert lines[0].startswith(f"msprobe {command}: error: "), lines[0]
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    assert run.code == code, (run.code, lines[0])
    return lines[0]


def l1_record(name: str) -> dict:
    return json.loads(L1.read_text())["data"][name]


def write_dump(path: Path, data: dict, **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    content = {"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, **fields,
               "data": data}
    path.write_text(json.dumps(content))
    return path


def write_config(path: Path, **fields) -> Path:
    path.write_text(json.dumps(fields))
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def touch_code(marker: Path) -> str:
    """The exploit's shell command building the marker path from chr() calls (no '/' in the key)."""
    return "+".join(f"chr({ord(c)})" for c in str(marker))


def run_script(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=SCRIPT_TIMEOUT,
                          cwd=str(path.parent), stdin=subprocess.DEVNULL)


def results(out: Path) -> list:
    (path,) = out.glob("accuracy_checking_result_*.csv")
    return read_csv(path)[1:]


# ------------------------------------------------------------------------------------------ 1. code injection
@VIA
def test_op_generate_dump_key_injection_is_refused(tmp_path, capsys, via):
    """The exploit of issue 18: the third segment of an entry name closes the script's docstring."""
    marker = tmp_path / "pwned"
    key = f'Functional.softmax.0"""\nfrom os import system as s\ns("touch "+{touch_code(marker)})\n""".forward'
    dump = write_dump(tmp_path / "dump.json", {key: l1_record("Functional.softmax.0.forward")})
    config = write_config(tmp_path / "config.json", dump_json_path="dump.json", api_name="Functional.softmax")
    out = tmp_path / "out"
    out.mkdir()
    run = run_cli(via, ["op_generate", "-i", config, "-o", out], capsys, tmp_path)
    assert_error(run, "op_generate", "is not named", "refused")
    assert os.listdir(out) == [] and not marker.exists()
    assert json.loads(dump.read_text())["data"].keys() == {key}


def _script(full_name: str, record: dict, api_name: str = "softmax") -> dict:
    return {"api_type": "Functional", "api_name": api_name, "full_name": full_name, "propagation": "forward",
            "data_mode": "random_data", "seed": 1, "iter_times": 1, "standard": "benchmark", "forward": record,
            "backward": None}


def test_generated_script_holds_the_dump_only_as_data(tmp_path):
    """Whatever a record holds (even a name that passed no check), the script's code is the same: the dump's text
    is inside one string constant, parsed as JSON when the script runs, and running it executes none of it."""
    from msprobe.acc_check.torch.op_generate import render

    marker = tmp_path / "pwned"
    evil = f'"""\nfrom os import system as s\ns("touch "+{touch_code(marker)})\n"""'
    record = l1_record("Functional.softmax.0.forward")
    hostile = dict(record, input_kwargs={"dim": {"type": "int", "value": -1}, evil: {"type": "str", "value": evil}})
    texts = {"benign": render(_script("Functional.softmax.0.forward", record)),
             "hostile": render(_script(f"Functional.softmax.0{evil}.forward", hostile, api_name=f"softmax{evil}"))}

    def code_of(text):
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "full_name" in node.value:
                node.value = "<CONFIG>"
        return ast.dump(tree)

    assert code_of(texts["benign"]) == code_of(texts["hostile"])
    path = tmp_path / "hostile.py"
    path.write_text(texts["hostile"])
    done = run_script(path)
    assert not marker.exists()
    assert done.returncode != 0 and "has no attribute" in done.stderr     # the hostile API name is only looked up


def test_generated_script_refuses_pickled_code(tmp_path):
    """real_data: a tensor file that is a pickle with __reduce__ is refused (torch.load weights_only=True)."""
    marker = tmp_path / "pwned"
    tensors = tmp_path / "dump" / "dump_tensor_data"
    tensors.mkdir(parents=True)

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    torch.save({"t": Evil()}, tensors / "x.pt")
    item = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0, "Min": 0.0,
            "requires_grad": False, "data_name": "x.pt"}
    dump = write_dump(tmp_path / "dump" / "dump.json", {"Functional.relu.0.forward": {
        "input_args": [item], "input_kwargs": {}, "output": [dict(item, data_name="y.pt")]}}, task="tensor",
        dump_data_dir=str(tensors))
    config = write_config(tmp_path / "config.json", dump_json_path=str(dump), api_name="Functional.relu.0",
                          data_mode="real_data")
    from conftest import run_cli as run_inproc

    assert run_inproc(["op_generate", "-i", config, "-o", tmp_path]) == 0
    script = tmp_path / "Functional.relu.0.forward.py"
    assert "weights_only=True" in script.read_text() and "weights_only=False" not in script.read_text()
    done = run_script(script)
    assert done.returncode != 0 and "Weights only load failed" in done.stderr
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ side effects
SAVE = {"input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0, "Min": 0.0,
                        "requires_grad": False}], "input_kwargs": {}, "output": []}


@VIA
def test_acc_check_refuses_apis_that_touch_files(tmp_path, capsys, via):
    written = tmp_path / "written.pt"
    save = dict(SAVE, input_args=[*SAVE["input_args"], {"type": "str", "value": str(written)}])
    dump = write_dump(tmp_path / "dump.json", {
        "Torch.save.0.forward": save, "Torch.from_file.0.forward": {
            "input_args": [{"type": "str", "value": str(written)}], "input_kwargs": {}, "output": []},
        "Functional.relu.0.forward": dict(SAVE, output=SAVE["input_args"])})
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out"], capsys, tmp_path)
    assert run.code == 0, run.err
    rows = results(tmp_path / "out")
    assert rows[0][:3] == ["Torch.save.0", "SKIP", "SKIP"] and "touches files (save)" in rows[0][3]
    assert rows[1][:3] == ["Torch.from_file.0", "SKIP", "SKIP"] and "touches files (from_file)" in rows[1][3]
    assert rows[2][:2] == ["Functional.relu.0", "pass"]
    assert not written.exists()


@VIA
def test_op_generate_refuses_apis_that_touch_files(tmp_path, capsys, via):
    dump = write_dump(tmp_path / "dump.json", {"Torch.save.0.forward": SAVE})
    config = write_config(tmp_path / "config.json", dump_json_path="dump.json", api_name="Torch.save.0")
    run = run_cli(via, ["op_generate", "-i", config, "-o", tmp_path], capsys, tmp_path)
    assert_error(run, "op_generate", "Torch.save.0.forward touches files (save)")
    assert sorted(os.listdir(tmp_path)) == ["config.json", "dump.json"] and dump.exists()


@pytest.mark.parametrize("name, touches", [
    ("Torch.save.0", "files (save)"), ("Torch.load.3", "files (load)"), ("Tensor.share_memory_.0", "processes"),
    ("Torch.compile.0", "processes"), ("Mint.distributed.all_reduce.0", "the network (distributed)"),
    ("Functional.save_checkpoint.0", "files"), ("Tensor.tofile.1", "files"), ("Functional.TensorDump.0", "files"),
    ("Torch.matmul.0", ""), ("Tensor.__add__.0", ""), ("Functional.broadcast_to.0", ""), ("Mint.gather.0", "")])
def test_side_effect_names(name, touches):
    from msprobe.acc_check.guard import side_effect

    found = side_effect(name)
    assert (touches in found and found) if touches else found == ""


# ------------------------------------------------------------------------------------------ inputs never replaced
@VIA
@pytest.mark.parametrize("target", ["dump", "config", "dump_via_dotdot"])
def test_op_generate_never_writes_over_an_input(tmp_path, capsys, via, target):
    dump = L1.read_bytes()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dump.json").write_bytes(dump)
    extract = {"dump": "d/dump.json", "config": "config.json", "dump_via_dotdot": "d/../d/dump.json"}[target]
    config = write_config(tmp_path / "config.json", dump_json_path="d/dump.json", api_name="Functional.gelu.0",
                          extract_api_path=extract)
    before = {name: digest(tmp_path / name) for name in ("d/dump.json", "config.json")}
    run = run_cli(via, ["op_generate", "-i", config, "-o", tmp_path], capsys, tmp_path)
    assert_error(run, "op_generate", "extract_api_path", "never writes over one of its inputs")
    assert {name: digest(tmp_path / name) for name in before} == before
    assert sorted(os.listdir(tmp_path)) == ["config.json", "d"]


# ------------------------------------------------------------------------------------------ 2. memory
def _tensor(shape, dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": 1.0, "Min": 0.0, "requires_grad": False}


def test_memory_estimate_by_hand():
    from msprobe.acc_check.guard import estimate, itemsize, parse_size

    forward = {"input_args": [_tensor([2, 3]), {"type": "int", "value": 1}], "input_kwargs": {"w": _tensor([5])},
               "output": [_tensor([2, 3])]}
    # inputs 6 x 4 + 5 x 4 = 44 bytes, four times; outputs 6 elements x 13 float64 arrays
    assert estimate(forward, None) == 4 * 44 + 6 * 13 * 8
    assert estimate(forward, {"input": [_tensor([2, 3])]}) == 2 * (4 * 44 + 6 * 13 * 8)
    assert [itemsize(d) for d in ("torch.bfloat16", "Float16", "torch.int64", "torch.bool", "mindspore.float64",
                                  "torch.complex64", "torch.uint8", "weird")] == [2, 2, 8, 1, 8, 8, 1, 8]
    assert parse_size("2G") == 2 * 1024 ** 3 and parse_size("512M") == 512 * 1024 ** 2
    assert parse_size("1.5KiB") == 1536 and parse_size("1000") == 1000
    for bad in ("", "-1G", "0", "lots", "nanG", "infM"):
        with pytest.raises(ValueError):
            parse_size(bad)


@VIA
def test_acc_check_never_allocates_a_huge_shape(tmp_path, capsys, via):
    """A [1e12] float32 input (4 TB) and a 4 GB one under a 1G budget are refused with a row saying why, before
    anything is allocated; a bad shape is a row too; the small API still runs."""
    dump = write_dump(tmp_path / "dump.json", {
        "Functional.relu.0.forward": {"input_args": [_tensor([10 ** 12])], "input_kwargs": {},
                                      "output": [_tensor([10 ** 12])]},
        "Functional.relu.1.forward": {"input_args": [_tensor([10 ** 9])], "input_kwargs": {},
                                      "output": [_tensor([10 ** 9])]},
        "Functional.relu.2.forward": {"input_args": [_tensor([-3])], "input_kwargs": {}, "output": []},
        "Functional.relu.3.forward": {"input_args": [_tensor([4])], "input_kwargs": {}, "output": [_tensor([4])]}})
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out", "--memory-budget", "1G"], capsys,
                  tmp_path)
    assert run.code == 0, run.err
    rows = results(tmp_path / "out")
    assert [row[:3] for row in rows[:3]] == [[f"Functional.relu.{i}", "SKIP", "SKIP"] for i in range(3)]
    # 4e12 x 4 bytes x 4 + 1e12 x 104 = 1.2e14 bytes = 109.1 TB
    assert "would need about 109.1 TB of memory" in rows[0][3] and "budget of 1.0 GB" in rows[0][3]
    assert "would need about 111.8 GB" in rows[1][3]
    assert "cannot be rebuilt" in rows[2][3] and "[-3]" in rows[2][3]
    assert rows[3][:2] == ["Functional.relu.3", "pass"]


@VIA
def test_memory_budget_usage_error(tmp_path, capsys, via):
    run = run_cli(via, ["acc_check", "-api_info", L1, "-o", tmp_path, "--memory-budget", "lots"], capsys, tmp_path)
    assert run.code == 2 and "invalid memory budget 'lots'" in run.err and "Traceback" not in run.err
    assert os.listdir(tmp_path) == []


def test_default_budget_is_half_the_available_memory(monkeypatch):
    from msprobe.acc_check import guard

    monkeypatch.setattr(guard, "available_memory", lambda: 8 * 1024 ** 3)
    assert guard.default_budget() == 4 * 1024 ** 3 and guard.default_budget(4) == 1024 ** 3


def test_multi_acc_check_forwards_the_budget(tmp_path):
    from conftest import run_cli as run_inproc

    assert run_inproc(["multi_acc_check", "-api_info", L1, "-d", "0", "-n", "2", "--workers", "1", "-o", tmp_path,
                       "--memory-budget", "1K"]) == 0
    from msprobe.acc_check.guard import estimate
    from msprobe.acc_check.registry import TORCH

    data = json.loads(L1.read_text())["data"]
    (path,) = tmp_path.glob("accuracy_checking_result_*_device0.csv")
    rows = read_csv(path)[1:]
    over = {row[0] for row in rows if "more than the budget of 1.0 KB (--memory-budget)" in row[-1]}
    expected = {name for name in (row[0] for row in rows) if TORCH.supported(name) and
                estimate(data[f"{name}.forward"], data.get(f"{name}.backward")) > 1024}
    assert len(rows) == 302 and over == expected and len(over) > 200
    assert all(row[1] == "SKIP" for row in rows if row[0] in over)


# ------------------------------------------------------------------------------------------ 3. NaN / Infinity
@VIA
def test_acc_check_messages_never_show_the_sentinels(tmp_path, capsys, via):
    nan_tensor = dict(_tensor([4]), Max=float("nan"), Min=float("-inf"))
    dump = write_dump(tmp_path / "dump.json", {
        "Tensor.__add__.0.forward": {"input_args": [nan_tensor, {"type": "float", "value": float("nan")}],
                                     "input_kwargs": {}, "output": [_tensor([4])]},
        "Functional.softmax.0.forward": {"input_args": [_tensor([4])], "output": [_tensor([4])],
                                         "input_kwargs": {"dim": {"type": "str", "value": float("inf")}}}})
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out"], capsys, tmp_path)
    assert run.code == 0, run.err
    for path in (tmp_path / "out").iterdir():
        text = path.read_text(encoding="utf-8")
        assert "\x00" not in text and "msprobe:" not in text, path
    rows = results(tmp_path / "out")
    assert rows[0][:2] == ["Tensor.__add__.0", "pass"]
    assert rows[1][1] == "SKIP" and "must be int, not float" in rows[1][3]      # the Infinity arrives as a float


@VIA
def test_op_generate_softmax_with_infinity_runs(tmp_path, capsys, via):
    """The L1 fixture's Functional.softmax.0 has Min -Infinity: the extracted JSON and the script hold floats."""
    config = write_config(tmp_path / "config.json", dump_json_path=str(L1), api_name="Functional.softmax.0",
                          extract_api_path="extract.json")
    run = run_cli(via, ["op_generate", "-i", config, "-o", tmp_path], capsys, tmp_path)
    assert run.code == 0, run.err
    extracted = (tmp_path / "extract.json").read_text()
    script = tmp_path / "Functional.softmax.0.forward.py"
    for text in (extracted, script.read_text()):
        assert "msprobe:" not in text and "u0000" not in text
    assert json.loads(extracted)["Functional.softmax.0.forward"]["input_args"][0]["Min"] == float("-inf")
    done = run_script(script)
    assert done.returncode == 0, done.stderr
    assert "Compare finished." in done.stdout and "| Result " in done.stdout


# ------------------------------------------------------------------------------------------ 4. unwritable outputs
def _faulty(via, argv, capsys, cwd, monkeypatch, root, code, after=-1) -> Run:
    """The command with writes under `root` failing (faults.py), in-process or in a subprocess."""
    sys.path.insert(0, str(HERE))
    try:
        import faults
    finally:
        sys.path.remove(str(HERE))
    if via == "inproc":
        faults.install(root, code, after, monkeypatch.setattr)
        try:
            return run_cli(via, argv, capsys, cwd)
        finally:
            monkeypatch.undo()
    env = {k: v for k, v in os.environ.items() if k != "MSPROBE_DEBUG"}
    env.update(faults.environment(root, code, after))
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", "import faults; faults.main()", *[str(a) for a in argv]],
                          cwd=str(cwd), env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    return Run(done.returncode, done.stdout, done.stderr)


@VIA
@pytest.mark.parametrize("after", [0, 300, 3000])
def test_acc_check_disk_full_leaves_no_partial_csv(tmp_path, capsys, monkeypatch, via, after):
    """The disk fills at the header, during the info file, or after some rows: one line, exit 1, nothing left."""
    out = tmp_path / "out"
    out.mkdir()
    run = _faulty(via, ["acc_check", "-api_info", L1, "-o", out], capsys, tmp_path, monkeypatch, out, "ENOSPC", after)
    assert_error(run, "acc_check", "No space left on device", str(out), "no result file of this run was kept")
    assert os.listdir(out) == []


@VIA
def test_acc_check_disk_full_on_resume_keeps_the_earlier_rows(tmp_path, capsys, monkeypatch, via):
    from conftest import run_cli as run_inproc

    data = json.loads(L1.read_text())
    names = [key for key in data["data"] if key.endswith(".forward")][:12]
    first = write_dump(tmp_path / "first" / "dump.json", {k: data["data"][k] for k in names[:4]})
    assert run_inproc(["acc_check", "-api_info", first, "-o", tmp_path / "out"]) == 0
    whole = write_dump(tmp_path / "dump.json", {k: data["data"][k] for k in names})
    (result,) = (tmp_path / "out").glob("accuracy_checking_result_*.csv")
    before = result.read_bytes()
    run = _faulty(via, ["acc_check", "-api_info", whole, "-csv_path", result], capsys, tmp_path, monkeypatch,
                  tmp_path / "out", "ENOSPC", 200)
    assert_error(run, "acc_check", "No space left on device", f"continue with -csv_path {result}")
    assert result.read_bytes().startswith(before)
    assert run_inproc(["acc_check", "-api_info", whole, "-csv_path", result]) == 0     # continued to the end
    assert [row[0] for row in read_csv(result)[1:]] == [name[: -len(".forward")] for name in names]


@VIA
@pytest.mark.parametrize("code, words", [("EROFS", "Read-only file system"), ("ENAMETOOLONG", "File name too long")])
def test_acc_check_unwritable_output_dir(tmp_path, capsys, monkeypatch, via, code, words):
    out = tmp_path / "out"
    out.mkdir()
    run = _faulty(via, ["acc_check", "-api_info", L1, "-o", out], capsys, tmp_path, monkeypatch, out, code)
    assert_error(run, "acc_check", words, str(out))
    assert os.listdir(out) == []


@VIA
@pytest.mark.parametrize("code, words", [("EROFS", "Read-only file system"), ("ENOSPC", "No space left on device")])
def test_op_generate_unwritable_output_dir(tmp_path, capsys, monkeypatch, via, code, words):
    out = tmp_path / "out"
    out.mkdir()
    config = write_config(tmp_path / "config.json", dump_json_path=str(L1), api_name="Functional.gelu.0")
    run = _faulty(via, ["op_generate", "-i", config, "-o", out], capsys, tmp_path, monkeypatch, out, code,
                  0 if code == "ENOSPC" else -1)
    assert_error(run, "op_generate", "cannot write", words, str(out))
    assert os.listdir(out) == []


@VIA
def test_op_generate_file_name_too_long(tmp_path, capsys, via):
    """A real ENAMETOOLONG: an extract_api_path of 300 characters."""
    config = write_config(tmp_path / "config.json", dump_json_path=str(L1), api_name="Functional.gelu.0",
                          extract_api_path="x" * 300 + ".json")
    run = run_cli(via, ["op_generate", "-i", config, "-o", tmp_path], capsys, tmp_path)
    assert_error(run, "op_generate", "cannot write extract_api_path", "File name too long")
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_mindspore_refusal_rows_name_the_directions_present():
    """A refused MindSpore API gets SKIP for the directions its dump records (spec §4.5 cells), like a failure."""
    from msprobe.acc_check.guard import refusal
    from msprobe.acc_check.registry import MINDSPORE

    data = {"Mint.save.0.forward": {}, "Tensor.add.0.backward": {"input": [_tensor([10 ** 12])]},
            "Tensor.add.0.forward": {"input_args": [_tensor([10 ** 12])], "output": [_tensor([10 ** 12])]}}
    message = refusal("Mint.save.0", data, 1024)
    assert message.startswith("API Mint.save.0 touches files (save)")
    saved = MINDSPORE.skip(data, "Mint.save.0", message)
    assert MINDSPORE.result_row(saved) == ["Mint.save.0", "SKIP", "", message]
    message = refusal("Tensor.add.0", data, 1024)
    assert "would need about 218.3 TB of memory" in message                   # (4 x 4e12 + 104e12) x 2 bytes
    assert MINDSPORE.result_row(MINDSPORE.skip(data, "Tensor.add.0", message))[1:3] == ["SKIP", "SKIP"]


def _peak_rss_of_acc_check(dump: Path, out: Path) -> int:
    """Peak RSS (bytes) of a fresh process that runs acc_check on `dump`."""
    code = ("import sys\nfrom msprobe.acc_check.check import run_acc_check\n"
            "run_acc_check(sys.argv[1], sys.argv[2], show_progress=False)\n"
            "print(next(int(line.split()[1]) for line in open('/proc/self/status') if line.startswith('VmHWM:')))")
    done = subprocess.run([sys.executable, "-c", code, str(dump), str(out)], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]) * 1024


@pytest.mark.slow
def test_each_api_is_freed_before_the_next(tmp_path):
    """Twelve [1024, 1024] gelu calls with backward (about 85 MB of tensors each) peak no higher than one call
    plus allocator slack: nothing of an API outlives it."""
    def dump(calls):
        data = {}
        for i in range(calls):
            item = dict(_tensor([1024, 1024]), requires_grad=True)
            data[f"Functional.gelu.{i}.forward"] = {"input_args": [item], "input_kwargs": {}, "output": [item]}
            data[f"Functional.gelu.{i}.backward"] = {"input": [item], "output": [item]}
        return write_dump(tmp_path / f"dump{calls}.json", data)

    one = _peak_rss_of_acc_check(dump(1), tmp_path / "one")
    twelve = _peak_rss_of_acc_check(dump(12), tmp_path / "twelve")
    assert twelve - one < 200 * 1024 ** 2, (one, twelve)     # measured +30 MB; keeping results: +700 MB
    assert all(row[1:3] == ["pass", "pass"] for row in results(tmp_path / "twelve"))


@VIA
def test_multi_acc_check_unwritable_output_dir(tmp_path, capsys, monkeypatch, via):
    """The driver's own writes (joining a device's splits, the summary) failing: one line, exit 1."""
    out = tmp_path / "out"
    out.mkdir()
    run = _faulty(via, ["multi_acc_check", "-api_info", L1, "-d", "0", "-n", "2", "--workers", "1", "-o", out],
                  capsys, tmp_path, monkeypatch, out, "EROFS")
    assert_error(run, "multi_acc_check", "cannot write", "Read-only file system", str(out))
    assert not list(out.glob("accuracy_checking_*_device0.csv")) and not list(out.glob("*summary*"))


@VIA
def test_real_data_counts_the_size_of_the_tensor_files(tmp_path, capsys, via):
    """A tensor file far larger than its dumped shape says is refused by its size, before it is loaded."""
    import numpy as np

    tensors = tmp_path / "dump_tensor_data"
    tensors.mkdir()
    np.save(tensors / "big.npy", np.zeros(2 * 1024 * 1024, dtype=np.float32))      # 8 MB, "shape [4]"
    np.save(tensors / "small.npy", np.ones(4, dtype=np.float32))

    def record(name):
        item = dict(_tensor([4]), data_name=name)
        return {"input_args": [item], "input_kwargs": {}, "output": [dict(item, data_name="out_" + name)]}

    dump = write_dump(tmp_path / "dump.json", {"Functional.relu.0.forward": record("big.npy"),
                                               "Functional.relu.1.forward": record("small.npy")}, task="tensor")
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out", "--memory-budget", "1M"], capsys,
                  tmp_path)
    assert run.code == 0, run.err
    rows = results(tmp_path / "out")
    assert rows[0][:3] == ["Functional.relu.0", "SKIP", "SKIP"]
    assert "would need about 32.0 MB of memory (estimated from the size of its tensor files)" in rows[0][3]
    assert rows[1][:2] == ["Functional.relu.1", "pass"]


# ------------------------------------------------------------------------------------------ formulas (issue 28)
FORMULA_API = "=cmd|' /C calc'!A0.softmax.0.forward"


@VIA
@pytest.mark.parametrize("command", ["acc_check", "multi_acc_check"])
def test_a_formula_like_api_name_is_refused_before_anything_is_written(tmp_path, capsys, via, command):
    """The result and details CSVs hold the API names in their first cells: a name a spreadsheet could run is
    refused with the check of the compare tables, and no file is made."""
    dump = write_dump(tmp_path / "in" / "dump.json", {"Functional.relu.0.forward": dict(SAVE, output=SAVE["input_args"]),
                                                      FORMULA_API: l1_record("Functional.softmax.0.forward")})
    out = tmp_path / "out"
    extra = ["-d", "0", "1"] if command == "multi_acc_check" else []
    run = run_cli(via, [command, "-api_info", dump, "-o", out, *extra], capsys, tmp_path)
    assert_error(run, command, "special characters", "=cmd|")
    assert not out.exists() or not os.listdir(out)


def test_the_result_files_refuse_a_formula_like_cell(tmp_path):
    """Whatever text reaches a row (a message quoting a value, a name), the writer refuses a formula-like cell
    before either file is touched."""
    from msprobe.acc_check.common import ApiResult
    from msprobe.acc_check.results import new_files
    from msprobe.errors import MsprobeError

    files = new_files(str(tmp_path), "20260101000000")
    before = [Path(files.result_path).read_bytes(), Path(files.details_path).read_bytes()]
    bad = ApiResult("Functional.relu.0", "SKIP", "SKIP", "@SUM(A1)")
    with pytest.raises(MsprobeError, match=r"Malicious value \[@SUM\(A1\)\].*row 1"):
        files.append(bad)
    files.close()
    assert [Path(files.result_path).read_bytes(), Path(files.details_path).read_bytes()] == before


# ------------------------------------------------------------------------------------------ what is read (issue 28)
def _real_data_dump(tmp_path, tensors_at, recorded):
    """A real-data dump at tmp_path/dump/dump.json whose tensor files are in `tensors_at` and whose dump.json
    records `recorded` as dump_data_dir."""
    import numpy as np

    tensors_at.mkdir(parents=True, exist_ok=True)
    np.save(tensors_at / "x.npy", np.ones(4, dtype=np.float32))
    np.save(tensors_at / "y.npy", np.ones(4, dtype=np.float32))
    item = dict(_tensor([4]), data_name="x.npy")
    data = {"Functional.relu.0.forward": {"input_args": [item], "input_kwargs": {},
                                          "output": [dict(item, data_name="y.npy")]}}
    return write_dump(tmp_path / "dump" / "dump.json", data, task="tensor", dump_data_dir=recorded)


@VIA
@pytest.mark.parametrize("layout", ["absolute elsewhere", "relative outside", "symlinked inside"])
def test_acc_check_reads_no_tensor_outside_the_dump_folder(tmp_path, capsys, via, layout):
    outside = tmp_path / "secret"
    if layout == "absolute elsewhere":
        dump = _real_data_dump(tmp_path, outside, str(outside))
    elif layout == "relative outside":
        dump = _real_data_dump(tmp_path, outside, "../secret")
    else:
        dump = _real_data_dump(tmp_path, outside, "data")
        os.symlink(outside, tmp_path / "dump" / "data")
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out"], capsys, tmp_path)
    assert_error(run, "acc_check", "real-data mode", str(tmp_path / "dump" / "dump_tensor_data"), "x.npy")


@VIA
def test_acc_check_reads_a_recorded_tensor_folder_inside_the_dump_folder(tmp_path, capsys, via):
    """acc_check's own error data records dump_data_dir as an absolute path inside the dump folder: still read."""
    dump = _real_data_dump(tmp_path, tmp_path / "dump" / "error_data", str(tmp_path / "dump" / "error_data"))
    run = run_cli(via, ["acc_check", "-api_info", dump, "-o", tmp_path / "out"], capsys, tmp_path)
    assert run.code == 0, run.err
    assert results(tmp_path / "out")[0][:2] == ["Functional.relu.0", "pass"]


@VIA
@pytest.mark.parametrize("layout", ["absolute elsewhere", "symlinked tensor folder"])
def test_op_generate_reads_no_tensor_outside_the_dump_folder(tmp_path, capsys, via, layout):
    outside = tmp_path / "secret"
    if layout == "absolute elsewhere":
        dump = _real_data_dump(tmp_path, outside, str(outside))
        words = ("x.npy", "not found")
    else:
        dump = _real_data_dump(tmp_path, outside, None)
        os.symlink(outside, tmp_path / "dump" / "dump_tensor_data")
        words = ("symbolic link",)
    config = write_config(tmp_path / "config.json", dump_json_path=str(dump), api_name="Functional.relu.0",
                          data_mode="real_data")
    run = run_cli(via, ["op_generate", "-i", config, "-o", tmp_path], capsys, tmp_path)
    assert_error(run, "op_generate", "real_data", *words)
