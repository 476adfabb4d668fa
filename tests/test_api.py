"""The Python API (msprobe/api.py): what it writes is what `msprobe compare` writes, to_pandas() holds the csv's
values, `import msprobe` stays light, errors are the CLI's, and nothing is printed unless logging is set up."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from docs_text import missing_blocks

import msprobe
from msprobe.errors import DumpFormatError, MsprobeError, PathError, UsageError

from conftest import FIXTURES, fixture_pair, only_file, read_csv, run_cli

REPO = Path(__file__).resolve().parent.parent
MAPS = FIXTURES / "cross" / "mappings"


def _files(directory: Path) -> dict:
    """Relative path -> file, without the command's resume markers."""
    return {p.relative_to(directory).as_posix(): p for p in directory.rglob("*")
            if p.is_file() and ".msprobe_done" not in p.parts}


def _stamp_of(directory: Path) -> str:
    names = [p.name for p in _files(directory).values() if p.suffix in (".xlsx", ".csv")]
    assert names, list(_files(directory))
    return Path(names[0]).stem[-14:]


def _xlsx_members(path: Path) -> list:
    """The members of an xlsx (a zip) with their bytes and compression: the file apart from the modification times
    zipfile stamps on every member."""
    with zipfile.ZipFile(path) as book:
        return [(info.filename, info.compress_type, book.read(info)) for info in book.infolist()]


def assert_same_outputs(cli_dir: Path, api_dir: Path, written: list) -> None:
    cli, api = _files(cli_dir), _files(api_dir)
    assert sorted(api) == sorted(cli)
    assert sorted(os.path.relpath(p, api_dir).replace(os.sep, "/") for p in written) == sorted(api)
    for name, path in cli.items():
        if name.endswith(".xlsx"):
            assert _xlsx_members(api[name]) == _xlsx_members(path), name
        else:
            assert api[name].read_bytes() == path.read_bytes(), name


def _cli_then_api(tmp_path: Path, target, golden, cli_args: list, api_kwargs: dict, write_kwargs: dict):
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", cli_dir, *cli_args]) == 0
    result = msprobe.compare(target, golden, **api_kwargs)
    written = result.write(api_dir, stamp=_stamp_of(cli_dir), **write_kwargs)
    assert_same_outputs(cli_dir, api_dir, written)
    return result, cli_dir


@pytest.mark.parametrize("case, cli_args, write_kwargs", [
    ("stats_mix_step0", [], {}),
    ("stats_mix_step0", ["--csv", "--html"], {"format": "csv", "html": True}),
    ("md5_mix_step0", ["--csv", "-c"], {"format": "csv", "advisor": False}),
    ("md5_mix_step0", ["--html"], {"html": True}),
    ("stats_L0_step0", ["-fm", "--csv"], {"format": "csv"}),
])
def test_written_files_are_the_commands(tmp_path, case, cli_args, write_kwargs):
    target, golden = fixture_pair(case)
    api_kwargs = {"fuzzy": True} if "-fm" in cli_args else {}
    result, _ = _cli_then_api(tmp_path, target, golden, cli_args, api_kwargs, write_kwargs)
    assert not result.failures and not result.problems and len(result.pairs) == 1


def test_written_tensor_mode_is_the_commands(tmp_path, tensor_mix):
    result, _ = _cli_then_api(tmp_path, *tensor_mix, ["--csv", "-j", "2"], {"jobs": 2}, {"format": "csv"})
    assert result.mode == "tensor" and "Cosine" in result.columns


def test_written_layer_mapping_is_the_commands(tmp_path):
    target, golden = FIXTURES / "cross" / "ms_L0" / "dump.json", FIXTURES / "cross" / "pt_L0" / "dump.json"
    _, cli_dir = _cli_then_api(tmp_path, target, golden, ["--csv", "-lm", MAPS / "layer_mapping.yaml"],
                               {"layer_mapping": MAPS / "layer_mapping.yaml"}, {"format": "csv"})
    only_file(cli_dir, "data_mapping_*.yaml")      # the generated mapping is among the files compared


@pytest.mark.slow
def test_folder_of_ranks(tmp_path, multirank_step0):
    target, golden = multirank_step0
    result, _ = _cli_then_api(tmp_path, target, golden, ["--csv", "--html", "-j", "2"], {"jobs": 2},
                              {"format": "csv", "html": True})
    assert sorted(result.ranks) == ["rank0", "rank1", "rank2", "rank3"]
    rank1 = result["rank1"]
    rows = read_csv(only_file(tmp_path / "cli", "compare_result_rank1_*.csv"))
    assert rank1.columns == rows[0] and len(rank1) == len(rows) - 1
    assert result.columns[0] == "Rank" and len(result) == sum(len(p) for p in result.pairs)
    counts = [p.summary.counts["error"] for p in result.pairs]
    assert result.summary.counts["error"] == sum(counts)
    first = next(p for p in result.pairs if p.summary.first_error)
    assert (result.summary.first_error, result.summary.first_error_rank) == (first.summary.first_error, first.label)
    assert result.rows[len(result.pairs[0])]["Rank"] == "rank1"


@pytest.mark.slow
def test_html_format_writes_the_pages_of_the_command(tmp_path, multirank_step0):
    target, golden = multirank_step0
    cli_dir = tmp_path / "cli"
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", cli_dir, "--html", "-c"]) == 0
    written = msprobe.compare(target, golden).write(tmp_path / "api", "html", advisor=False, stamp=_stamp_of(cli_dir))
    pages = {n: p for n, p in _files(cli_dir).items() if n.endswith(".html")}
    assert len(pages) == 5 and sorted(os.path.relpath(p, tmp_path / "api") for p in written) == sorted(pages)
    for name, page in pages.items():
        assert (tmp_path / "api" / name).read_bytes() == page.read_bytes(), name


def test_rows_summary_and_columns_of_one_pair():
    target, golden = fixture_pair("stats_mix_step0")
    result = msprobe.compare(target, golden)
    table = read_csv(FIXTURES / "stats_mix_step0" / "reference.csv.gz")
    assert len(result) == len(table) - 1 == 1350
    summary = result.summary
    assert summary.mode == "statistics" and summary.rows == 1350 and summary.matched == 1350
    assert sum(summary.counts.values()) == 1350
    assert summary.counts["error"] == result.column("Result").count("error")
    # the culprit: the output of the bf16 linear of blocks.0.mlp.fc1, where the precision drops (fixtures/README.md)
    assert summary.first_error == "Functional.linear.2.forward.output.0"
    assert result.rows[summary.first_error_row - 1]["NPU Name"] == summary.first_error
    assert result.rows[summary.first_error_row - 1]["Result"] == "error"
    assert "dtype" in summary.advice
    assert result.cells["NPU Name"] == [row["NPU Name"] for row in result.rows]
    assert result.ranks == {"": result.pairs[0]}


def _pandas():
    return pytest.importorskip("pandas", reason='pandas is not installed (pip install "msprobe-toolkit[pandas]")')


def _csv_number(text: str) -> float:
    """A metric cell of the csv as a number, parsed here independently of the API: 12.5% -> 0.125."""
    text = text.strip()
    if text.endswith("%"):
        return float(text[:-1]) * 0.01
    if text == "True":
        return 1.0
    if text == "False":
        return 0.0
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return math.nan if value != value else value


@pytest.mark.parametrize("case, cli_args", [("stats_mix_step0", []), ("md5_mix_step0", [])])
def test_to_pandas_round_trips_the_csv(tmp_path, case, cli_args):
    pd = _pandas()
    target, golden = fixture_pair(case)
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--csv", "-c", *cli_args]) == 0
    frame = msprobe.compare(target, golden).to_pandas()
    csv = pd.read_csv(only_file(tmp_path, "compare_result_*.csv"), dtype=str, keep_default_na=False)
    _assert_frame_holds_csv(pd, frame, csv)


@pytest.mark.slow
def test_to_pandas_round_trips_the_tensor_csv(tmp_path, tensor_mix):
    pd = _pandas()
    assert run_cli(["compare", "-tp", tensor_mix[0], "-gp", tensor_mix[1], "-o", tmp_path, "--csv", "-c"]) == 0
    frame = msprobe.compare(*tensor_mix).to_pandas()
    csv = pd.read_csv(only_file(tmp_path, "compare_result_*.csv"), dtype=str, keep_default_na=False)
    _assert_frame_holds_csv(pd, frame, csv)
    assert frame["Cosine"].dtype == "float64" and frame["Cosine"].notna().any()


def _assert_frame_holds_csv(pd, frame, csv) -> None:
    assert list(frame.columns) == list(csv.columns) and len(frame) == len(csv)
    numeric = [c for c in frame.columns if frame[c].dtype == "float64"]
    assert "NPU max" in numeric or "NPU MD5" in frame.columns
    for name in frame.columns:
        texts = csv[name].tolist()
        if name in numeric:
            expected = [_csv_number(t) for t in texts]
            got = frame[name].tolist()
            for row, (a, b) in enumerate(zip(got, expected)):
                assert (math.isnan(a) and math.isnan(b)) or a == b or abs(a - b) <= 1e-15 * abs(b), (name, row)
        elif name == "Requires_grad Consistent":
            assert frame[name].dtype == bool and frame[name].tolist() == [t == "True" for t in texts]
        else:
            got = frame[name].tolist()
            for row, (a, text) in enumerate(zip(got, texts)):
                if text == "N/A":
                    assert isinstance(a, float) and math.isnan(a), (name, row)
                else:
                    assert a == text, (name, row)
    # N/A is NaN, percentages are fractions: a statistics row whose golden max is N/A, and a relative error
    if "MaxRelativeErr" in frame.columns and "Bench max" in frame.columns:
        percent = csv["MaxRelativeErr"].str.endswith("%")
        if percent.any():
            row = int(percent.idxmax())
            assert frame["MaxRelativeErr"][row] == pytest.approx(float(csv["MaxRelativeErr"][row][:-1]) / 100)


def test_to_pandas_of_a_folder_starts_with_the_rank(multirank_step0):
    pd = _pandas()
    result = msprobe.compare(*multirank_step0, jobs=1)
    frame = result.to_pandas()
    assert list(frame.columns) == result.columns and frame.columns[0] == "Rank"
    assert frame.groupby("Rank").size().to_dict() == {p.label: len(p) for p in result.pairs}
    per_rank = result["rank2"].to_pandas()
    pd.testing.assert_frame_equal(frame[frame["Rank"] == "rank2"].drop(columns="Rank").reset_index(drop=True),
                                  per_rank)


def test_to_pandas_without_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)       # import pandas raises ImportError
    result = msprobe.compare(*fixture_pair("stats_L0_step0"))
    with pytest.raises(ImportError, match=r'pip install "msprobe-toolkit\[pandas\]"'):
        result.to_pandas()
    with pytest.raises(ImportError, match=r'msprobe-toolkit\[pandas\]'):
        msprobe.read_dump(fixture_pair("stats_L0_step0")[0]).to_pandas()


def test_read_dump_entries():
    target = fixture_pair("stats_mix_step0")[0]
    entries = msprobe.read_dump(target)
    content = json.loads(Path(target).read_text())
    assert entries.framework == content["framework"] and entries.task == "statistics"
    first = entries[0]
    assert first.name == "Functional.embedding.0.forward.input.0" and first.op == "Functional.embedding.0.forward"
    recorded = content["data"]["Functional.embedding.0.forward"]["input_args"][0]
    assert (first.dtype, first.shape, first.max, first.min) == (recorded["dtype"], tuple(recorded["shape"]),
                                                               recorded["Max"], recorded["Min"])
    # the same items, in the same order, as the rows of the compare table of this dump against itself
    names = msprobe.compare(target, target).column("NPU Name")
    assert [e.name for e in entries] == names and len(entries) == len(names)
    assert msprobe.read_dump(Path(target).parent)[-1] == entries[-1]      # a rank folder holding dump.json
    assert not entries.has_md5 and {e.md5 for e in entries} == {None}
    md5_target = fixture_pair("md5_mix_step0")[0]
    md5 = msprobe.read_dump(md5_target)
    table = msprobe.compare(md5_target, md5_target)
    assert md5.has_md5 and [e.md5 or "N/A" for e in md5] == table.column("NPU MD5")


def test_read_dump_to_pandas():
    _pandas()
    target = fixture_pair("stats_mix_step0")[0]
    entries = msprobe.read_dump(target)
    frame = entries.to_pandas()
    assert list(frame.columns) == list(msprobe.DumpEntry._fields) == [
        "name", "op", "state", "dtype", "shape", "requires_grad", "max", "min", "mean", "norm", "md5", "data_name"]
    assert len(frame) == len(entries) and frame["max"].dtype == "float64"
    for row in (0, 1, len(entries) - 1):
        entry = entries[row]
        expected = entry.max if isinstance(entry.max, (int, float)) else math.nan
        assert frame["max"][row] == expected or (math.isnan(expected) and math.isnan(frame["max"][row]))
        assert frame["name"][row] == entry.name and frame["shape"][row] == entry.shape


def test_diff_analyze_of_one_pair():
    analysis = msprobe.diff_analyze(*fixture_pair("stats_mix_step0"))
    assert analysis.op_name == "Functional.linear.2.forward" and analysis.rank == 0
    assert analysis.ops[0].role == "origin" and analysis.ops[0].op_name == analysis.op_name
    assert analysis.record["rank_0"][0]["op_name"] == analysis.op_name
    assert analysis.lines[0].startswith("Divergence starts on rank 0 at Functional.linear.2.forward")
    assert analysis.dtype_aware is None or "op_name" in analysis.dtype_aware


def test_diff_analyze_matches_the_commands_file(tmp_path, multirank_step0):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "cli", "-da", "-j", "2"]) == 0
    written = json.loads(only_file(tmp_path / "cli", "diff_analyze_*.json").read_text())
    before = set(Path(tmp_path).rglob("*"))
    analysis = msprobe.diff_analyze(target, golden, jobs=2)
    assert set(Path(tmp_path).rglob("*")) == before          # nothing written
    config = written["culprit"].pop("next_dump_config")          # the files -da wrote beside its analysis
    golden_config = written["culprit"].pop("next_dump_golden_config")
    assert json.loads(json.dumps(analysis.record, default=str)) == written
    # the same configurations; the API's dump into ./next_dump/<side>, the command's into <-o>/next_dump/<side>
    for side, path, got in (("target", config, analysis.next_dump), ("golden", golden_config, analysis.next_dump_golden)):
        on_disk = json.loads(Path(path).read_text())
        assert on_disk["dump_path"] == str((tmp_path / "cli" / "next_dump" / side).resolve())
        assert got == dict(on_disk, dump_path=os.path.join(".", "next_dump", side))
    assert analysis.culprit["op_name"] == "Functional.linear.2.forward" and analysis.culprit["rank"] == 1
    assert analysis.rank == 1 and analysis.ops[0].rank == 1 and analysis.ops[0].label == "rank1"
    received = [op for op in analysis.ops if op.role == "received through communication"]
    assert sorted(op.rank for op in received) == [0, 2, 3]
    assert all(op.op_name.startswith("Distributed.all_reduce") for op in received)
    assert str(analysis).startswith("Divergence starts on rank1")


def test_diff_analyze_carries_dtype_aware_from_the_finding(monkeypatch):
    from msprobe.compare import diff_analyze as module

    original = module.analysis_record

    def with_dtype_aware(finding):
        return {**original(finding), "dtype_aware": {"op_name": "X.forward", "rank": 0}}

    monkeypatch.setattr(module, "analysis_record", with_dtype_aware)
    assert msprobe.diff_analyze(*fixture_pair("stats_mix_step0")).dtype_aware == {"op_name": "X.forward", "rank": 0}


def test_no_divergence():
    target = fixture_pair("stats_L0_step0")[0]
    analysis = msprobe.diff_analyze(target, target)
    assert analysis.op_name is None and analysis.ops == () and analysis.record == {} and analysis.clean_ranks == (0,)


def test_errors_are_the_commands(tmp_path, monkeypatch):
    target, golden = fixture_pair("stats_mix_step0")
    with pytest.raises(PathError, match="does not exist"):
        msprobe.compare(tmp_path / "missing.json", golden)
    with pytest.raises(UsageError, match="same type"):
        msprobe.compare(target, Path(golden).parent)
    bad = tmp_path / "dump.json"
    bad.write_text("{not json")
    with pytest.raises(DumpFormatError):
        msprobe.compare(bad, golden)
    with pytest.raises(DumpFormatError):
        msprobe.read_dump(bad)
    with pytest.raises(UsageError, match="mode"):
        msprobe.compare(target, golden, mode="tensor")
    with pytest.raises(UsageError, match="jobs"):
        msprobe.compare(target, golden, jobs=0)
    with pytest.raises(UsageError, match="format"):
        msprobe.compare(target, golden).write(tmp_path / "o", format="parquet")
    with pytest.raises(UsageError, match="stamp"):
        msprobe.compare(target, golden).write(tmp_path / "o", stamp="2026-11-24")
    assert not (tmp_path / "o").exists()
    # issue 34: bytes or None as the folder was a bare TypeError (after creating the folder for bytes); a text as
    # fuzzy was taken as true; a failing pair of files read "no dump pair could be analysed: : <message>"
    monkeypatch.chdir(tmp_path)
    for output_dir in (b"out", None, 3):
        with pytest.raises(UsageError, match=r"^output_dir must be a path \(str or os.PathLike of str\), got "):
            msprobe.compare(target, golden).write(output_dir)
    assert sorted(os.listdir(tmp_path)) == ["dump.json"]
    for function in (msprobe.compare, msprobe.diff_analyze):
        with pytest.raises(UsageError, match="fuzzy must be True or False, got 'no'"):
            function(target, golden, fuzzy="no")
    other = json.loads(Path(target).read_text())
    other["task"] = "tensor"
    (tmp_path / "tensor.json").write_text(json.dumps(other))
    with pytest.raises(MsprobeError, match="^no dump pair could be analysed: Please check the dump task"):
        msprobe.diff_analyze(tmp_path / "tensor.json", golden)
    os.remove(tmp_path / "tensor.json")
    with pytest.raises(DumpFormatError, match="not valid JSON"):
        msprobe.compare(tmp_path, tmp_path)                   # a rank folder: its pair is compared at once
    (tmp_path / "empty").mkdir()
    with pytest.raises(MsprobeError, match="nothing to compare"):
        msprobe.compare(tmp_path / "empty", tmp_path / "empty")
    assert issubclass(msprobe.PathError, msprobe.MsprobeError) and msprobe.MsprobeError is MsprobeError


def test_a_failing_rank_is_reported_and_the_others_compared(tmp_path, multirank_step0):
    import shutil

    target, golden = multirank_step0
    broken = tmp_path / "target"
    shutil.copytree(target, broken)
    (broken / "rank2" / "dump.json").write_text("[1, 2]")
    result = msprobe.compare(broken, golden, jobs=1)
    assert sorted(result.ranks) == ["rank0", "rank1", "rank3"]
    assert list(result.failures) == ["rank2"] and "not a msprobe dump" in result.failures["rank2"]


def _run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)


def test_import_loads_no_numpy_torch_or_pandas(tmp_path):
    """The import graph of `import msprobe` (and of taking the API's names): no numpy, torch or pandas; the
    import time is printed for the record, not asserted."""
    code = """
import json, sys, time
start = time.perf_counter()
import msprobe
after_import = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "torch", "pandas", "msprobe"))
elapsed = time.perf_counter() - start
from msprobe import compare, diff_analyze, read_dump, CompareResult, MsprobeError
names = sorted(m for m in sys.modules if m.split(".")[0] in ("numpy", "torch", "pandas"))
print(json.dumps({"import": after_import, "names": names, "ms": elapsed * 1000}))
"""
    done = _run_python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    print(f"import msprobe: {found['ms']:.1f} ms")
    assert found["import"] == ["msprobe", "msprobe.version"] and found["names"] == []


@pytest.mark.slow
def test_the_api_prints_nothing_unless_logging_is_configured(tmp_path, multirank_step0):
    """A folder with a rank on one side only gives a warning record; without logging set up, nothing reaches
    stdout or stderr (workers included); with logging.basicConfig the records are there."""
    import shutil

    target = tmp_path / "target"
    shutil.copytree(multirank_step0[0], target)
    shutil.rmtree(target / "rank3")
    golden = multirank_step0[1]
    code = f"""
import msprobe
result = msprobe.compare({str(target)!r}, {str(golden)!r}, jobs=2)
result.write("out", format="csv")
msprobe.diff_analyze({str(target)!r}, {str(golden)!r}, jobs=1)
msprobe.read_dump({str(golden / "rank0")!r})
assert result.problems and "rank3" in result.problems[0], result.problems
"""
    quiet = _run_python(code, tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout, quiet.stderr) == ("", "")
    assert list((tmp_path / "out").glob("compare_result_rank0_*.csv"))
    spawned = _run_python("import multiprocessing; multiprocessing.set_start_method('spawn')\n" + code, tmp_path)
    assert spawned.returncode == 0, spawned.stderr
    assert (spawned.stdout, spawned.stderr) == ("", "")      # workers that set up logging afresh stay quiet too
    loud = _run_python("import logging; logging.basicConfig(level=logging.INFO)\n" + code, tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "rank3 exists only in the golden dump" in loud.stderr and "Compare mode: statistics" in loud.stderr
    # a handler of the user's own on the msprobe logger is all there is: no task adds a console handler beside it,
    # in this process (one worker) or in forked workers
    own_handler = ("import logging, sys\nlogger = logging.getLogger('msprobe')\n"
                   "logger.addHandler(logging.StreamHandler(sys.stderr))\nlogger.setLevel(logging.INFO)\n")
    for jobs in (1, 2):
        own = _run_python(own_handler + code.replace("jobs=2", f"jobs={jobs}"), tmp_path)
        assert own.returncode == 0, own.stderr
        assert own.stdout == "" and "Compare mode: statistics" in own.stderr, (jobs, own.stdout)


def test_compare_is_callable_and_the_subpackage_importable():
    import importlib

    pipeline = importlib.import_module("msprobe.compare.pipeline")
    import msprobe.compare.pipeline as again

    assert again is pipeline and msprobe.compare.pipeline is pipeline
    assert callable(msprobe.compare) and "golden" in msprobe.compare.__doc__
    import inspect

    assert list(inspect.signature(msprobe.compare).parameters)[:2] == ["target", "golden"]


def test_the_walk_through_of_docs_python_api_runs(tmp_path, monkeypatch, capsys):
    """docs/python_api.md's python blocks run in order on a copy of examples/ (the plot only with matplotlib)."""
    import re
    import shutil

    _pandas()
    text = (REPO / "docs" / "python_api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    outputs = re.findall(r"```text\n(.*?)```", text, re.S)
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran_plot = False
    for block in blocks:
        if "matplotlib" in block:
            try:
                import matplotlib
            except ImportError:
                continue
            matplotlib.use("Agg")
            ran_plot = True
        exec(compile(block, "docs/python_api.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert outputs[0].strip() in printed.splitlines()      # the summary line: counts only, no float digits
    assert missing_blocks(outputs, printed) == []           # every output the page shows, as printed
    assert namespace["analysis"].op_name == "Functional.linear.2.forward"
    assert len(namespace["top"]) == 10 and len(namespace["paths"]) == 3
    assert not ran_plot or (tmp_path / "norm_relative_error.png").stat().st_size > 0


def test_the_readme_python_lines_run(tmp_path, monkeypatch):
    import re
    import shutil

    _pandas()
    (block,) = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    assert len(block.strip().splitlines()) == 3
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert len(namespace["worst"]) == 10 and namespace["result"].summary.counts["error"] == 6


def test_a_dump_root_of_steps(tmp_path):
    """Two step folders: the command's step0/ and step1/ files, and one DiffAnalysis per step."""
    import shutil

    for side in ("target", "golden"):
        for step in (0, 1):
            shutil.copytree(FIXTURES / f"stats_L1_step{step}" / side, tmp_path / "root" / side / f"step{step}")
    target, golden = tmp_path / "root" / "target", tmp_path / "root" / "golden"
    result, _ = _cli_then_api(tmp_path, target, golden, ["--csv"], {"jobs": 2}, {"format": "csv"})
    assert sorted(result.ranks) == ["step0", "step1"]
    analysis = msprobe.diff_analyze(target, golden, jobs=1)
    assert sorted(analysis.steps) == ["step0", "step1"]
    for step, found in analysis.steps.items():
        alone = msprobe.diff_analyze(FIXTURES / f"stats_L1_{step}" / "target" / "dump.json",
                                     FIXTURES / f"stats_L1_{step}" / "golden" / "dump.json")
        assert (found.op_name, found.step) == (alone.op_name, step)
        assert [(op.op_name, op.role, op.position) for op in found.ops] == \
            [(op.op_name, op.role, op.position) for op in alone.ops]
        # a step folder holding the dump itself is one process, rank 0 (the step heads its lines when printed)
        assert found.lines[0].startswith(f"Divergence starts on rank 0 at {alone.op_name}")
    assert analysis.op_name == analysis.steps["step0"].op_name is not None


def test_printing_the_analysis_of_a_dump_root_shows_every_step(tmp_path, capsys, fresh_logger):
    """print(diff_analyze(root)) answers for every step, as `compare -da` on the root prints it."""
    import shutil

    for side in ("target", "golden"):
        for step in (0, 1):
            shutil.copytree(FIXTURES / f"stats_L1_step{step}" / side, tmp_path / "root" / side / f"step{step}")
    target, golden = tmp_path / "root" / "target", tmp_path / "root" / "golden"
    analysis = msprobe.diff_analyze(target, golden, jobs=1)
    printed = str(analysis).splitlines()
    assert printed == [line for step in ("step0", "step1") for line in (f"{step}:", *analysis.steps[step].lines)]
    assert sum(line.startswith("Divergence starts on ") for line in printed) == 2
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "out", "-da", "-j", "1"]) == 0
    console = [line.split("[INFO] ", 1)[-1] for line in capsys.readouterr().out.splitlines()]
    at = 0
    for line in printed:                        # in the same order
        at = console.index(line, at) + 1


def _compare_in_a_pool_worker(paths):
    import msprobe

    result = msprobe.compare(*paths, jobs=2)
    return [pair.label for pair in result.pairs], result.summary.rows


def test_api_compare_of_a_rank_folder_inside_a_pool_worker(multirank_step0):
    """Issue 28: a multiprocessing.Pool worker is daemonic and may not start processes; the ranks of a folder are
    compared one after the other in it (it raised a bare AssertionError)."""
    import multiprocessing

    target, golden = multirank_step0
    with multiprocessing.get_context("fork").Pool(1) as pool:
        labels, rows = pool.apply(_compare_in_a_pool_worker, ((str(target), str(golden)),))
    assert len(labels) >= 2 and rows > 0
