"""Figures the docs quote from our outputs are what the commands give today: every command of
docs/cross_framework.md is run and its quoted log lines checked, its counts in prose recomputed, and the example
logs of docs/compare.md, docs/merge_result.md and docs/code_mapping.md re-run. (The verdict counts of the
cross-framework pages are not quoted: they follow the compare rules, not the mappings.)"""

from __future__ import annotations

import re
import shlex
import shutil
from collections import Counter
from functools import lru_cache

import pytest
import yaml
from cross_agreement import agreement
from docs_text import DOCS, ROOT, blocks_after, code_blocks, log_lines, missing_lines

from conftest import FIXTURES, only_file, read_csv, run_cli

CROSS_DOC = DOCS / "cross_framework.md"
CROSS = FIXTURES / "cross"
MAPS = CROSS / "mappings"


def _run_quoted(command: str, tmp_path, monkeypatch, capsys, files: dict | None = None) -> str:
    """Run a `msprobe ...` command line of a doc from the repository root, its output folder `out` (and any file
    it names in `files`) moved under tmp_path; the printed log."""
    monkeypatch.chdir(ROOT)
    args = shlex.split(command.replace("$C", "tests/fixtures/cross"))
    assert args[0] == "msprobe"
    args = args[1:]
    for name, content in (files or {}).items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        args = [str(tmp_path / name) if a == name else a for a in args]
    out = args.index("-o") + 1
    args[out] = str(tmp_path / args[out])
    capsys.readouterr()
    assert run_cli(args) == 0
    printed = capsys.readouterr()
    return printed.out + printed.err


def _cross_command_blocks() -> list:
    return [block for block in code_blocks(CROSS_DOC) if re.search(r"^msprobe .*compare ", block, re.M)
            and log_lines(block)]


@pytest.mark.parametrize("block", _cross_command_blocks(), ids=lambda b: shlex.split(b)[-1][:40])
def test_cross_framework_commands_print_the_quoted_counts(block, tmp_path, monkeypatch, capsys):
    (command,) = [line for line in block.splitlines() if line.startswith("msprobe ")]
    files = {}
    if "-i compare.json" in command:
        (config,) = [b for b in code_blocks(CROSS_DOC, "json") if '"npu_path"' in b]
        files["compare.json"] = config
    printed = _run_quoted(command, tmp_path, monkeypatch, capsys, files)
    assert missing_lines(log_lines(block), printed) == []


def test_every_command_of_cross_framework_md_is_checked():
    blocks = _cross_command_blocks()
    assert len(blocks) == 6
    assert all(re.search(r"\d+ rows \(\d+ matched, \d+ without golden partner\)", b) for b in blocks)


@lru_cache(maxsize=None)
def _compare(tmp: str, level: str, *args: str) -> tuple:
    """(rows, matched rows, agreeing rows, {NPU Name: (Bench Name, NPU max, Bench max, Result)}) of a cross
    compare."""
    out = f"{tmp}/{level}_{abs(hash(args))}"
    assert run_cli(["compare", "-tp", CROSS / f"ms_{level}" / "dump.json", "-gp", CROSS / f"pt_{level}" / "dump.json",
                    "-o", out, "--csv", "-c", *args]) == 0
    table = read_csv(only_file(out, "compare_result_*.csv"))
    matched, agree = agreement(table)
    header = table[0]
    columns = [header.index(c) for c in ("Bench Name", "NPU max", "Bench max", "Result")]
    names = {row[0]: tuple(row[c] for c in columns) for row in table[1:]}
    return len(table) - 1, matched, agree, names


@pytest.fixture(scope="module")
def compare(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("cross"))
    return lambda level, *args: _compare(tmp, level, *(str(a) for a in args))


def _figures(pattern: str) -> tuple:
    """The numbers of the one place of cross_framework.md that the pattern finds."""
    text = " ".join(CROSS_DOC.read_text(encoding="utf-8").split())      # line breaks as spaces
    found = re.findall(pattern, text)
    assert len(found) == 1, f"{pattern!r} is in cross_framework.md {len(found)} times"
    return tuple(int(n) for n in (found[0] if isinstance(found[0], tuple) else (found[0],)))


def test_counts_in_the_prose_of_cross_framework_md(compare, tmp_path):
    rows, matched, _, _ = compare("mix")
    assert _figures(r"an unmapped compare pairs \*\*(\d+) of (\d+)\*\* target rows") == (matched, rows)
    rows, matched, _, _ = compare("L0")
    assert _figures(r"an unmapped compare pairs nothing: (\d+) of (\d+) rows") == (matched, rows)
    builtin = compare("mix", "-am")[1]
    assert _figures(r"`-am` pairs \*\*(\d+)\*\* rows") == (builtin,)
    assert _figures(r"It pairs (\d+) on L1 as well") == (compare("L1", "-am")[1],)
    custom = compare("mix", "-am", MAPS / "api_mapping.yaml")[1]
    assert _figures(r"The file adds (\d+) primitive rows to the (\d+) of the built-in rules") == \
        (custom - builtin, builtin)
    reference = read_csv(CROSS / "reference" / "mix_am_userapi.csv.gz")
    assert _figures(r"The reference pairs no primitive with this file; it stays at (\d+)") == \
        (agreement(reference)[0],)
    assert _figures(r"the yaml pairs the (\d+) rows of the renamed layers") == \
        (compare("L0", "-cm", MAPS / "cell_mapping.yaml")[1] - compare("L0", "-cm")[1],)
    for level in ("L0", "mix"):
        assert _figures(rf"\| {level} \((\d+) rows\) \| (\d+) \| (\d+) \|") == \
            (compare(level)[0], compare(level, "-cm")[1], compare(level, "-cm", MAPS / "cell_mapping.yaml")[1])
    data_mapping = MAPS / "data_mapping.yaml"
    assert _figures(r"`\$C/mappings/data_mapping.yaml` \((\d+) entries") == \
        (len(yaml.safe_load(data_mapping.read_text(encoding="utf-8"))),)
    l0, mix = compare("L0", "-dm", data_mapping), compare("mix", "-dm", data_mapping)
    assert _figures(r"It pairs all \*\*(\d+) of (\d+)\*\* rows on L0 and \*\*(\d+) of (\d+)\*\* on mix") == \
        (l0[1], l0[0], mix[1], mix[0])
    assert _figures(r"Without the yaml, (\d+) rows pair") == (compare("mix", "-lm")[1],)
    layers = yaml.safe_load((MAPS / "layer_mapping.yaml").read_text(encoding="utf-8"))
    (extra,) = [yaml.safe_load(b) for b in code_blocks(CROSS_DOC, "yaml") if b.startswith("Linear:")]
    (tmp_path / "layers.yaml").write_text(yaml.safe_dump({**layers, **extra}), encoding="utf-8")
    _, matched, agree, _ = compare("mix", "-lm", tmp_path / "layers.yaml")
    assert _figures(r"the mix result stays at (\d+) rows, (\d+) of them with equal statistics") == (matched, agree)
    assert matched == compare("mix", "-lm", MAPS / "layer_mapping.yaml")[1]       # the entry is built in
    rows, matched, _, _ = compare("L1", "-lm", MAPS / "layer_mapping.yaml")
    assert _figures(r"\(L1: (\d+) of (\d+) rows, as without a mapping\)") == (matched, rows) == \
        (compare("L1")[1], compare("L1")[0])
    both = compare("mix", "-am", "-cm", MAPS / "cell_mapping.yaml")[1]
    cells = compare("mix", "-cm", MAPS / "cell_mapping.yaml")[1] - compare("mix", "-cm")[1]
    assert _figures(r"The (\d+) rows are the (\d+) of `-am` plus the (\d+) cell rows") == (both, builtin, cells)
    reference = read_csv(CROSS / "reference" / "mix_am_cm_yaml.csv.gz")
    assert _figures(r"Its `-am -cm` table therefore equals its `-am` table: (\d+) rows") == \
        (agreement(reference)[0],)


def test_the_api_table_counts_of_cross_framework_md():
    table = yaml.safe_load((ROOT / "msprobe" / "data" / "ms_to_pt_api.yaml").read_text(encoding="utf-8"))
    keys = Counter(k.split(".")[0] for k in table)
    values = Counter(v.split(".")[0] for v in table.values())
    assert _figures(r"It has \*\*(\d+) entries\*\*") == (len(table),)
    assert _figures(r"Keys: `Functional.\*` (\d+) \(`mindspore.ops` functions\) and `Tensor.\*` (\d+)") == \
        (keys["Functional"], keys["Tensor"])
    assert _figures(r"Values: `Torch.\*` (\d+), `Functional.\*` (\d+) \(`torch.nn.functional`\) and `Tensor.\*` "
                    r"(\d+)\.") == (values["Torch"], values["Functional"], values["Tensor"])


def test_the_backward_pairing_table_of_cross_framework_md(compare):
    """§7: the n-th backward call pairs with the n-th; the reference pairs them in reverse order."""
    section = CROSS_DOC.read_text(encoding="utf-8").split("## 7. Backward pairing", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(Mint\.\S+)` \| ([\d.]+) \| `(\S+)`, ([\d.]+) \| `(\S+)`, ([\d.]+) \|$", section, re.M)
    assert len(rows) == 4
    ours = compare("mix", "-am")[3]
    reference = read_csv(CROSS / "reference" / "mix_am.csv.gz")
    theirs = {row[0]: (row[1], row[reference[0].index("Bench max")]) for row in reference[1:]}
    for name, npu_max, bench, bench_max, ref_bench, ref_max in rows:
        our_bench, our_npu_max, our_bench_max, _ = ours[name]
        assert (bench, ref_bench) == (our_bench, theirs[name][0])
        for quoted, value in ((npu_max, our_npu_max), (bench_max, our_bench_max), (ref_max, theirs[name][1])):
            assert abs(float(quoted) - float(value)) <= 5e-7 * max(1.0, abs(float(value))) + 5e-8
    _, _, _, mapped = compare("mix", "-dm", MAPS / "data_mapping.yaml")
    reference = read_csv(CROSS / "reference" / "mix_dm.csv.gz")
    theirs = {row[0]: (row[1], row[reference[0].index("Bench max")]) for row in reference[1:]}
    text = " ".join(section.split())
    (quoted,) = re.findall(r"the reference pairs `(\S+)` \(max ([\d.]+)\) with `(\S+)` \(([\d.]+)\)\. Here it is "
                           r"paired with `(\S+)` \(([\d.]+)\)", text)
    name, npu_max, ref_bench, ref_max, bench, bench_max = quoted
    assert theirs[name][0] == ref_bench and mapped[name][0] == bench
    for value, actual in ((npu_max, mapped[name][1]), (ref_max, theirs[name][1]), (bench_max, mapped[name][2])):
        assert abs(float(value) - float(actual)) <= 5e-7


def test_the_pairs_cross_framework_md_shows(compare, tmp_path):
    """The rows quoted as examples of a mapping pair with the Bench Name they show, with the verdict they show."""
    blocks = [b for b in code_blocks(CROSS_DOC) if re.match(r"(NPU Name.*\n)?Primitive\.", b)]
    assert len(blocks) == 3
    (gather,) = [yaml.safe_load(b) for b in code_blocks(CROSS_DOC, "yaml") if b.startswith("ms_api: Primitive.gather")]
    (tmp_path / "gather.yaml").write_text(yaml.safe_dump(gather), encoding="utf-8")
    mappings = [MAPS / "api_mapping.yaml", MAPS / "api_mapping.yaml", tmp_path / "gather.yaml"]
    for block, mapping in zip(blocks, mappings):
        rows = compare("mix", "-am", mapping)[3]
        for name, bench, *rest in (line.split() for line in block.splitlines() if line.startswith("Primitive.")):
            assert rows[name][0] == bench, (name, rows[name][0])
            verdict = [word for word in rest if word in ("pass", "warning", "error")]
            assert verdict in ([], [rows[name][3]]), (name, rows[name][3])


# ---------------------------------------------------------------------------------------------------------------
# docs/compare.md, merge_result.md: the example logs


def test_the_api_list_counts_of_acc_check_md():
    text = " ".join((DOCS / "acc_check.md").read_text(encoding="utf-8").split())
    pytorch = yaml.safe_load((ROOT / "msprobe" / "data" / "acc_check_pytorch_apis.yaml").read_text(encoding="utf-8"))
    mindspore = yaml.safe_load((ROOT / "msprobe" / "data" / "acc_check_mindspore_apis.yaml").read_text(encoding="utf-8"))
    (quoted,) = re.findall(r"\((\d+) functional, (\d+) tensor, (\d+) torch names\)", text)
    assert tuple(map(int, quoted)) == (len(pytorch["functional"]), len(pytorch["tensor"]), len(pytorch["torch"]))
    assert re.findall(r"`Tensor.\*` with one of the (\d+) names", text) == [str(len(mindspore["tensor"]))]
    assert re.findall(r"the (\d+) `mint` and (\d+) `mint.nn.functional` callables", text) == \
        [(str(len(mindspore["mint"])), str(len(mindspore["mint_functional"])))]


def _quoted_log(doc: str, marker: str) -> list:
    """The log lines of the first code block after `marker` that quotes a log."""
    return next(lines for lines in map(log_lines, blocks_after(DOCS / doc, marker)) if lines)


def test_the_console_summary_example_of_compare_md(tmp_path, monkeypatch, capsys):
    printed = _run_quoted("msprobe compare -tp examples/target/dump.json -gp examples/golden/dump.json -o out --csv",
                          tmp_path, monkeypatch, capsys)
    quoted = [line for line in _quoted_log("compare.md", "For the\nexample dumps the log reads") if "(...)" not in line]
    assert len(quoted) >= 5
    assert missing_lines(quoted, printed) == []
    advisor = only_file(tmp_path / "out", "advisor_*.txt").read_text(encoding="utf-8")
    (quoted,) = [b for b in blocks_after(DOCS / "compare.md", "as three lines (four in statistics") if b.startswith("Line:")]
    assert missing_lines(quoted.splitlines(), advisor) == []


def test_the_four_rank_example_of_compare_md(multirank_step0, tmp_path, capsys):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "dir_out", "--csv", "-j", "2"]) == 0
    quoted = _quoted_log("compare.md", "The end of the log (timestamps and process ids removed)")
    assert len(quoted) == 5
    assert missing_lines(quoted, capsys.readouterr().out) == []


def test_the_example_of_dump_roots_that_do_not_match_everywhere(multirank_step0, tmp_path, capsys):
    """compare.md §9.4: t/ holds step0/rank0, step0/rank1, step1/rank0; g/ holds step0/rank0, a truncated
    step1/rank0 and step2/rank0."""
    target, golden = multirank_step0
    layout = {"t/step0/rank0": target / "rank1", "t/step0/rank1": target / "rank0", "t/step1/rank0": target / "rank2",
              "g/step0/rank0": golden / "rank1", "g/step1/rank0": golden / "rank2", "g/step2/rank0": golden / "rank3"}
    for where, source in layout.items():
        shutil.copytree(source, tmp_path / where)
    broken = tmp_path / "g" / "step1" / "rank0" / "dump.json"
    broken.write_text(broken.read_text(encoding="utf-8")[:200], encoding="utf-8")
    assert run_cli(["compare", "-tp", tmp_path / "t", "-gp", tmp_path / "g", "-o", tmp_path / "out", "--csv", "-c",
                    "-j", "2"]) == 0
    printed = capsys.readouterr()
    quoted = _quoted_log("compare.md", "Two dump roots that do not match everywhere")
    assert len(quoted) == 7
    assert missing_lines(quoted, printed.out + printed.err) == []


def test_the_first_divergence_examples_of_compare_md(multirank_step0, tmp_path, capsys):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "da_out", "-da"]) == 0
    quoted = [line for line in _quoted_log("compare.md", "Four ranks, only rank 1 perturbed")
              if "Saving json file" not in line]
    assert any("Divergence starts on rank1" in line for line in quoted)
    printed = capsys.readouterr().out
    assert missing_lines(quoted, printed) == []
    (op, error) = re.search(r"Divergence starts on rank1 at (\S+) .*? outputs ([\d.e+-]+);", printed).groups()
    report = " ".join((DOCS / "report.md").read_text(encoding="utf-8").split())
    assert re.findall(r"`rank_1: (\S+) \(origin, max output relative error ([\d.e+-]+)\)`", report) == [(op, error)]
    pair = FIXTURES / "stats_L0_step0"
    assert run_cli(["compare", "-tp", pair / "target" / "dump.json", "-gp", pair / "golden" / "dump.json",
                    "-o", tmp_path / "da2", "-da"]) == 0
    quoted = [line for line in _quoted_log("compare.md", "A single-process pair of files (level L0, modules only)")
              if "Saving json file" not in line]
    assert any("Divergence starts on rank 0" in line for line in quoted)
    assert missing_lines(quoted, capsys.readouterr().out) == []
    import json

    record = json.loads(only_file(tmp_path / "da2", "diff_analyze_*.json").read_text(encoding="utf-8"))
    text = " ".join((DOCS / "compare.md").read_text(encoding="utf-8").split())
    (quoted,) = re.findall(r"The file holds `rank_0` with one node: `(\S+)` \(`origin`, `max_output_relative_error` "
                           r"([\d.]+)\)", text)
    nodes = [(n["op_name"], n["role"], n["max_output_relative_error"]) for n in record["rank_0"]]
    assert [(name, role) for name, role, _ in nodes] == [(quoted[0], "origin")]
    assert abs(float(quoted[1]) - nodes[0][2]) < 1e-9
    assert record["culprit"]["op_name"] == quoted[0]
    (md5_line,) = re.findall(r"On the md5 fixture \(`md5_mix_step0`\) the first line reads `([^`]+)`", text)
    pair = FIXTURES / "md5_mix_step0"
    assert run_cli(["compare", "-tp", pair / "target" / "dump.json", "-gp", pair / "golden" / "dump.json",
                    "-o", tmp_path / "da3", "-da"]) == 0
    assert missing_lines([md5_line], capsys.readouterr().out) == []


def test_the_kernel_compare_example_of_compare_md(tmp_path, capsys):
    import tarfile

    with tarfile.open(FIXTURES / "kernel_l2.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    assert run_cli(["compare", "-tp", tmp_path / "kernel_l2" / "target", "-gp", tmp_path / "kernel_l2" / "golden",
                    "-o", tmp_path / "out", "--rank", "0"]) == 0
    quoted = _quoted_log("compare.md", "The MindSpore 2.10 L2 kernel dump of the fixtures")
    assert any("Accuracy Reached or Not: " in line for line in quoted)
    assert missing_lines(quoted, capsys.readouterr().out) == []
    # the three rows the page shows, from the same compare written as csv
    assert run_cli(["compare", "-tp", tmp_path / "kernel_l2" / "target", "-gp", tmp_path / "kernel_l2" / "golden",
                    "-o", tmp_path / "csv", "--rank", "0", "--csv"]) == 0
    table = read_csv(only_file(tmp_path / "csv", "compare_result_*.csv"))
    header = table[0]
    by_file = {row[0].rsplit("/", 1)[-1]: row for row in table[1:]}
    section = (DOCS / "compare.md").read_text(encoding="utf-8").split("Three rows of the table", 1)[1]
    quoted = re.findall(r"^\| `(\S+\.npy)` \| (.*) \|$", section.split("\n\n", 2)[1], re.M)
    columns = ["NPU Dtype", "NPU Tensor Shape", "NPU max", "Accuracy Reached or Not", "Err_message", "Cosine",
               "MaxAbsErr"]
    assert len(quoted) == 3
    for name, cells in quoted:
        shown = [cell.strip().strip("`").replace("\\n", "\n") for cell in cells.split("|")]
        assert shown == [by_file[name][header.index(c)] for c in columns], name


def test_the_figures_of_the_merge_result_example(multirank_step0, tmp_path, capsys):
    """merge_result.md: the log line and the rows of the example on the four-rank fixture."""
    import ast

    import openpyxl

    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "results", "-j", "2", "-c"]) == 0
    assert run_cli(["merge_result", "-i", tmp_path / "results", "-o", tmp_path / "merged", "-config",
                    FIXTURES / "merge" / "merge_config.yaml"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    doc = DOCS / "merge_result.md"
    text = " ".join(doc.read_text(encoding="utf-8").split())
    (quoted,) = re.findall(r"The log reports `([^`]+)`", text)
    assert quoted in printed
    book = openpyxl.load_workbook(only_file(tmp_path / "merged", "*.xlsx"))
    block = blocks_after(doc, "The log reports")[0]
    sheet = None
    checked = 0
    for line in block.splitlines():
        name, _, rest = line.partition(":") if re.match(r"^\w[\w ]*:", line) else ("", "", line)
        sheet = book[name] if name else sheet
        if rest.strip():
            row = ast.literal_eval(rest.strip())
            assert row in list(sheet.iter_rows(values_only=True)), (sheet.title, row)
            checked += 1
    assert checked == 5
