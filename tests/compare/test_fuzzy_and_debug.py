"""Fuzzy matching (-fm) in every mode, and debug.json (single-point save) pairs."""

from __future__ import annotations

import json
import re

from docs_text import DOCS, log_lines, missing_lines

from conftest import FIXTURES, fixture_pair, only_file, read_csv, run_cli
from test_conformance import reference_view


def record(mx, dtype="torch.float32"):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": [4], "Max": mx, "Min": 0.0, "Mean": 0.5, "Norm": 1.0,
            "requires_grad": False}


def write_dump(path, data, construct, task="statistics"):
    path.mkdir(parents=True)
    (path / "dump.json").write_text(json.dumps({"task": task, "level": "mix", "framework": "pytorch",
                                                "dump_data_dir": None, "data": data}))
    (path / "construct.json").write_text(json.dumps(construct))
    return path / "dump.json"


def test_fuzzy_pairs_calls_by_order_under_the_same_parent(tmp_path):
    # The target made one extra relu call elsewhere first, so every later call count is shifted by one.
    target = write_dump(tmp_path / "t", {
        "Functional.relu.0.forward": {"input_args": [record(9.0)]},
        "Functional.relu.1.forward": {"input_args": [record(1.0)]},
        "Functional.relu.2.forward": {"input_args": [record(2.0)]},
    }, {"Functional.relu.0.forward": "Module.extra.Extra.forward.0",
        "Functional.relu.1.forward": "Module.mlp.MLP.forward.0", "Functional.relu.2.forward": "Module.mlp.MLP.forward.0"})
    golden = write_dump(tmp_path / "g", {
        "Functional.relu.0.forward": {"input_args": [record(1.0)]},
        "Functional.relu.1.forward": {"input_args": [record(2.0)]},
    }, {"Functional.relu.0.forward": "Module.mlp.MLP.forward.0", "Functional.relu.1.forward": "Module.mlp.MLP.forward.0"})
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "exact", "--csv", "-c"]) == 0
    exact = read_csv(only_file(tmp_path / "exact", "*.csv"))
    assert [r[1] for r in exact[1:]] == ["Functional.relu.0.forward.input.0", "Functional.relu.1.forward.input.0",
                                         "N/A"]
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "fm", "--csv", "-c", "-fm"]) == 0
    fuzzy = read_csv(only_file(tmp_path / "fm", "*.csv"))
    header = fuzzy[0]
    assert [(r[0], r[1], r[header.index("Max diff")]) for r in fuzzy[1:]] == [
        ("Functional.relu.0.forward.input.0", "N/A", "N/A"),
        ("Functional.relu.1.forward.input.0", "Functional.relu.0.forward.input.0", "0"),
        ("Functional.relu.2.forward.input.0", "Functional.relu.1.forward.input.0", "0")]


def test_fuzzy_in_statistics_and_md5_pairs_everything(tmp_path):
    """The reference pairs nothing here; identical names must all pair and equal the exact table."""
    for case in ("stats_mix_step0", "md5_mix_step0"):
        target, golden = fixture_pair(case)
        assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / case, "--csv", "-c", "-fm"]) == 0
        ours = read_csv(only_file(tmp_path / case, "*.csv"))
        reference = read_csv(FIXTURES / case / "reference.csv.gz")
        assert reference_view(ours, reference, case) == reference


def test_fuzzy_on_multirank_directories(multirank_step0, tmp_path):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "--csv", "-c", "-fm"]) == 0
    for rank in range(4):
        table = read_csv(only_file(tmp_path, f"compare_result_rank{rank}_*.csv"))
        assert len(table) == 1677 and all(r[1] != "N/A" for r in table[1:])


def debug_dump(path, value):
    path.mkdir(parents=True)
    data = {"x2.0.debug": record(value), "x2_grad.0.debug": record(1.0), "loss.0.debug": [record(3.0), record(4.0)]}
    (path / "debug.json").write_text(json.dumps({"task": "statistics", "level": "debug", "framework": "pytorch",
                                                 "dump_data_dir": None, "data": data}))
    return path / "debug.json"


def test_debug_json_pair_and_step_folder(tmp_path, capsys):
    target, golden = debug_dump(tmp_path / "t" / "rank0", 2.0), debug_dump(tmp_path / "g" / "rank0", 1.0)
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "o1", "--csv", "-c"]) == 0
    table = read_csv(only_file(tmp_path / "o1", "debug_compare_result_*.csv"))
    assert [r[0] for r in table[1:]] == ["x2.0.debug", "x2_grad.0.debug", "loss.0.debug.0", "loss.0.debug.1"]
    assert table[1][table[0].index("Max diff")] == "1.0"
    # the example of docs/compare.md §10 is this run: its log line and its table
    section = (DOCS / "compare.md").read_text(encoding="utf-8").split("## 10. debug.json", 1)[1].split("\n## ", 1)[0]
    assert missing_lines(log_lines(section), capsys.readouterr().out) == []
    columns = [table[0].index(c) for c in ("NPU Name", "Bench Name", "Max diff", "Result", "Err_message")]
    quoted = re.findall(r"^\| `(\S+)` \| `(\S+)` \| `(\S+)` \| (\w+) \| `(\S+)` \|$", section, re.M)
    assert quoted == [tuple(row[c] for c in columns) for row in table[1:]]
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "o2", "--csv"]) == 0
    only_file(tmp_path / "o2", "debug_compare_result_rank0_*.csv")
