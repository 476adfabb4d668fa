"""merge_result: the reference's own multi-rank results merged into the same workbook, plus what we add."""

from __future__ import annotations

import ast
import csv
import re
import shutil
import zipfile

import openpyxl
import pytest
from docs_text import DOCS, blocks_after

from msprobe.table import readers

from conftest import FIXTURES, only_file, read_csv, run_cli

MERGE = FIXTURES / "merge"


def assert_same_workbook(ours_path, reference_path):
    ours = openpyxl.load_workbook(ours_path)
    reference = openpyxl.load_workbook(reference_path)
    assert ours.sheetnames == reference.sheetnames + ["Consistency"]
    for name in reference.sheetnames:
        ref_rows = list(reference[name].iter_rows(values_only=True))
        our_rows = list(ours[name].iter_rows(values_only=True))
        assert len(our_rows) == len(ref_rows)
        for ref_row, our_row in zip(ref_rows, our_rows):
            for a, b in zip(ref_row, our_row):
                if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
                    assert b == pytest.approx(a, rel=1e-6)
                else:
                    assert a == b, (name, ref_row[0], a, b)


@pytest.mark.parametrize("config, reference", [("merge_config.yaml", "merge.xlsx"),
                                               ("merge_config_all_index.yaml", "merge_all_index.xlsx")])
def test_reference_results_merge_into_the_reference_workbook(config, reference, tmp_path):
    assert run_cli(["merge_result", "-i", MERGE / "results", "-o", tmp_path, "-config", MERGE / config]) == 0
    assert_same_workbook(only_file(tmp_path, "multi_ranks_compare_merge_*.xlsx"), MERGE / "reference" / reference)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["--csv", "--xlsx"])
def test_our_compare_results_merge_the_same(fmt, multirank_step0, tmp_path):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "cmp", fmt, "-c"]) == 0
    assert run_cli(["merge_result", "-i", tmp_path / "cmp", "-o", tmp_path / "out", "-config",
                    MERGE / "merge_config_all_index.yaml"]) == 0
    assert_same_workbook(only_file(tmp_path / "out", "*.xlsx"), MERGE / "reference" / "merge_all_index.xlsx")


def test_consistency_sheet_names_the_rank_whose_collective_output_differs(multirank_step0, tmp_path, capsys):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "cmp", "--csv", "-c"]) == 0
    victim = only_file(tmp_path / "cmp", "compare_result_rank2_*.csv")
    table = read_csv(victim)
    header = table[0]
    name = "Distributed.all_reduce.0.forward.output.0"
    for row in table[1:]:
        if row[0] == name:
            row[header.index("NPU max")] = "123.0"
    with open(victim, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(table)
    assert run_cli(["merge_result", "-i", tmp_path / "cmp", "-o", tmp_path / "out", "-config",
                    MERGE / "merge_config.yaml"]) == 0
    sheet = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))["Consistency"]
    rows = {r[0]: r for r in sheet.iter_rows(min_row=2, values_only=True)}
    assert rows[name][3] is False and rows[name][4] == "rank2"
    assert rows["Distributed.all_reduce.1.forward.output.0"][3] is True
    assert sum(1 for r in rows.values() if r[3] is False) == 1
    red = [row[0].fill.fgColor.rgb for row in sheet.iter_rows(min_row=2) if row[0].value == name]
    assert red == ["FFFF0000"]
    # the example of docs/merge_result.md is this run: its log and its two rows
    doc = DOCS / "merge_result.md"
    (ending,) = re.findall(r"The log ends with\s+`([^`]+)`", doc.read_text(encoding="utf-8"))
    assert ending in capsys.readouterr().out
    quoted = blocks_after(doc, "The log ends with")[0].replace("<- red", "").replace(",\n ", ", ")
    quoted = [ast.literal_eval(line.strip()) for line in quoted.splitlines() if line.strip()]
    assert quoted == [rows[name], rows["Distributed.all_reduce.1.forward.output.0"]]


def test_group_rows_show_the_group(tmp_path):
    header = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Requires_grad", "Bench Requires_grad", "Max diff", "Min diff", "Mean diff", "L2norm diff",
              "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min",
              "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
              "Requires_grad Consistent", "Result", "Err_message"]
    for rank in (0, 1):
        row = ["Distributed.all_reduce.0.forward.input.group"] * 2 + ["torch.ProcessGroup"] * 2 + ["[]"] * 2 + \
              ["N/A"] * 2 + ["0"] * 8 + ["[0, 1]"] * 8 + ["True", "pass", "[]"]
        with open(tmp_path / f"compare_result_rank{rank}_20260101000000.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([header, row])
    (tmp_path / "cfg.yaml").write_text("api: [Distributed]\ncompare_index: [Max diff]\n")
    assert run_cli(["merge_result", "-i", tmp_path, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 0
    sheet = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))["Max diff"]
    assert [c.value for c in sheet[2]] == ["Distributed.all_reduce.0.forward.input.group", "NPU:[0, 1]  Bench:[0, 1]",
                                          "NPU:[0, 1]  Bench:[0, 1]"]


def copy_results(tmp_path, ranks=(0, 1, 2, 3)):
    folder = tmp_path / "in"
    folder.mkdir()
    for path in (MERGE / "results").glob("*.xlsx"):
        if int(path.name.split("_")[2][4:]) in ranks:
            shutil.copy(path, folder)
    return folder


@pytest.mark.parametrize("setup, config, words", [
    ("empty", "api: [Distributed]", "no more than 1"),
    ("one", "api: [Distributed]", "no more than 1"),
    ("ok", "- a\n- b", "must be a mapping"),
    ("ok", "compare_index: [Max diff]", "APIs required to merge"),
    ("ok", "api: Distributed", "'api' is incorrect"),
    ("ok", "api: [Distributed]\ncompare_index: [Cosine]", "not valid for statistics"),
    ("ok", "api: [Torch.nothing]", "Nothing to merge"),
    ("badname", "api: [Distributed]", "Wrong compare result name"),
    ("truncated", "api: [Distributed]", "not a readable xlsx"),
])
def test_bad_input(setup, config, words, tmp_path, capsys):
    folder = tmp_path / "in"
    if setup == "empty":
        folder.mkdir()
    else:
        folder = copy_results(tmp_path, (0,) if setup == "one" else (0, 1, 2, 3))
    if setup == "badname":
        shutil.copy(next(folder.glob("*.xlsx")), folder / "compare_result_rankX.xlsx")
    if setup == "truncated":
        victim = next(folder.glob("*rank1_*.xlsx"))
        victim.write_bytes(victim.read_bytes()[:5000])
    (tmp_path / "cfg.yaml").write_text(config + "\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_mixed_modes_name_the_files(tmp_path, capsys, tensor_mix):
    folder = copy_results(tmp_path, (0, 1))
    target, golden = tensor_mix
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "t", "-c"]) == 0
    only_file(tmp_path / "t", "*.xlsx").rename(folder / "compare_result_rank7_20260101000000.xlsx")
    (tmp_path / "cfg.yaml").write_text("api: [Functional]\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 1
    err = capsys.readouterr().err
    assert "mix modes" in err and "compare_result_rank7_20260101000000.xlsx" in err


def test_zip_bombs_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_MEMBER_BYTES", 1000)
    folder = copy_results(tmp_path)
    with pytest.raises(Exception, match="larger than"):
        readers.read_xlsx(str(next(folder.glob("*.xlsx"))))
    with zipfile.ZipFile(tmp_path / "evil.xlsx", "w") as archive:
        archive.writestr("../evil.xml", "x")
    with pytest.raises(Exception, match="unsafe member"):
        readers.read_xlsx(str(tmp_path / "evil.xlsx"))


def test_reader_selects_rows_from_inline_and_shared_strings(tmp_path):
    from msprobe.table.model import ResultTable
    from msprobe.table.xlsx_writer import write_xlsx

    long_name = "Distributed.all_reduce.0.forward.output.0." + "x" * 80
    table = ResultTable(columns=["NPU Name", "Stack"], cells={"NPU Name": ["Torch.a.0.forward.input.0", long_name],
                                                             "Stack": ["s" * 100, "s" * 100]})
    write_xlsx(table, str(tmp_path / "t.xlsx"), highlight_column=None)
    header, rows = readers.read_xlsx(str(tmp_path / "t.xlsx"), lambda name: "Distributed." in name)
    assert header == ["NPU Name", "Stack"] and rows == [[long_name, "s" * 100]]


def test_each_rank_is_checked_within_its_own_group(tmp_path):
    header = ["NPU Name", "Bench Name", "Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr",
              "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
              "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent", "Result",
              "Err_message"]
    outputs = {0: "5.0", 1: "5.0", 2: "5.0", 3: "7.0"}          # ranks 2 and 3 share a group and disagree
    for rank, value in outputs.items():
        group = "[0, 1]" if rank < 2 else "[2, 3]"
        rows = [header,
                ["Distributed.all_reduce.0.forward.input.group"] * 2 + ["0"] * 8 + [group] * 8 + ["True", "pass", "[]"],
                ["Distributed.all_reduce.0.forward.output.0"] * 2 + ["0"] * 8 + [value] * 8 + ["True", "pass", "[]"]]
        with open(tmp_path / f"compare_result_rank{rank}_20260101000000.csv", "w", newline="") as handle:
            csv.writer(handle).writerows(rows)
    (tmp_path / "cfg.yaml").write_text("api: [Distributed.all_reduce]\ncompare_index: [Max diff]\n")
    assert run_cli(["merge_result", "-i", tmp_path, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 0
    sheet = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))["Consistency"]
    rows = [r for r in sheet.iter_rows(min_row=2, values_only=True)]
    assert [(r[1], r[2], r[3]) for r in rows] == [("[0, 1]", "rank0 rank1", True), ("[2, 3]", "rank2 rank3", False)]
    assert rows[1][4] in ("rank2", "rank3")


@pytest.mark.slow
def test_results_resaved_with_coloured_rich_text_merge_the_same(tmp_path):
    """Issue 18: a result re-saved by openpyxl with coloured rich text (`<color>` inside the cells) lost 116 of
    239 rows; names and messages coloured in every other row must change nothing."""
    from openpyxl.cell.rich_text import CellRichText, TextBlock
    from openpyxl.cell.text import InlineFont

    folder = tmp_path / "in"
    folder.mkdir()
    for path in (MERGE / "results").glob("*.xlsx"):
        book = openpyxl.load_workbook(path)
        sheet = book.active
        message = [c.value for c in sheet[1]].index("Err_message") + 1
        for row in range(2, sheet.max_row + 1, 2):
            name = sheet.cell(row, 1).value
            sheet.cell(row, 1).value = CellRichText(TextBlock(InlineFont(color="FFFF0000"), name[:12]), name[12:])
            sheet.cell(row, message).value = CellRichText(TextBlock(InlineFont(color="FF00FF00"), "colour"), " x")
        book.save(folder / path.name)
    assert b"<color" in zipfile.ZipFile(next(folder.glob("*.xlsx"))).read("xl/worksheets/sheet1.xml")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", MERGE / "merge_config.yaml"]) == 0
    assert_same_workbook(only_file(tmp_path / "out", "*.xlsx"), MERGE / "reference" / "merge.xlsx")


STAT_HEADER = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
               "NPU Requires_grad", "Bench Requires_grad", "Max diff", "Min diff", "Mean diff", "L2norm diff",
               "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min",
               "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm",
               "Requires_grad Consistent", "Result", "Err_message"]


def stat_row(name, max_diff="0", npu_max="1.0", bench_max="1.0"):
    row = dict.fromkeys(STAT_HEADER, "0")
    row.update({"NPU Name": name, "Bench Name": name, "Max diff": max_diff, "NPU max": npu_max,
                "Bench max": bench_max, "Requires_grad Consistent": "True", "Result": "pass", "Err_message": "[]"})
    return [row[c] for c in STAT_HEADER]


def write_ranks(folder, rows, ranks=(0, 1)):
    folder.mkdir(exist_ok=True)
    for rank in ranks:
        with open(folder / f"compare_result_rank{rank}_20260101000000.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([STAT_HEADER] + rows)
    return folder


def test_an_output_that_was_none_shows_n_a(tmp_path):
    """Spec §6: `NPU:N/A  Bench:N/A` when the output was None (compare writes its statistics as None)."""
    folder = write_ranks(tmp_path / "in", [stat_row("Torch.empty.0.forward.output.0", "N/A", "None", "None")])
    (tmp_path / "cfg.yaml").write_text("api: [Torch.empty]\ncompare_index: [Max diff]\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 0
    sheet = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))["Max diff"]
    assert [c.value for c in sheet[2]] == ["Torch.empty.0.forward.output.0", "NPU:N/A  Bench:N/A",
                                          "NPU:N/A  Bench:N/A"]


@pytest.mark.parametrize("value", ['=HYPERLINK("http://evil","x")', "=cmd|' /C calc'!A0", "@SUM(1)", "1;=2+3"])
def test_formula_like_metric_cells_are_refused(value, tmp_path, capsys):
    folder = write_ranks(tmp_path / "in", [stat_row("Distributed.all_reduce.0.forward.output.0", value)])
    (tmp_path / "cfg.yaml").write_text("api: [Distributed]\ncompare_index: [Max diff]\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Malicious value" in err[0] and value in err[0]
    assert not list((tmp_path / "out").iterdir())


def test_repeated_compare_index_gives_one_sheet_each_and_unknown_keys_are_named(tmp_path, capsys):
    folder = write_ranks(tmp_path / "in", [stat_row("Distributed.all_reduce.0.forward.output.0")])
    (tmp_path / "cfg.yaml").write_text("api: [Distributed, Distributed]\ncompare_index: [Max diff, Max diff, "
                                       "Min diff, Max diff]\ncompare_indexes: [Cosine]\nbackend: x\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 0
    out = capsys.readouterr().out
    assert "compare_index lists Max diff more than once; one sheet each." in out
    assert "unknown key(s) ignored: 'compare_indexes', 'backend'" in out
    book = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))
    assert book.sheetnames == ["Max diff", "Min diff", "Consistency"]
    assert book["Max diff"].max_row == 2


def test_absurd_configs_are_refused_before_parsing(tmp_path, capsys, monkeypatch):
    from msprobe.merge import merge_result

    folder = write_ranks(tmp_path / "in", [stat_row("Distributed.all_reduce.0.forward.output.0")])
    (tmp_path / "big.yaml").write_text("api:\n" + "".join(f"  - Torch.op{i}\n" for i in range(60_000)))
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "big.yaml"]) == 1
    assert "a merge config (a list of API prefixes) is at most 1048576 bytes" in capsys.readouterr().err
    monkeypatch.setattr(merge_result, "MAX_APIS", 100)
    (tmp_path / "aliases.yaml").write_text("x: &a Distributed\napi: [" + ", ".join(["*a"] * 101) + "]\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "aliases.yaml"]) == 1
    assert "'api' lists 101 entries; at most 100 are supported" in capsys.readouterr().err


def test_many_apis_select_the_same_rows_in_time_linear_in_the_rows(tmp_path, capsys):
    """20,000 APIs (3 of them present) select what the 3 alone select; the rows are matched through an index,
    not API by API (the code before took 60 s for 10,000 APIs on these four results)."""
    import time

    apis = [f"Torch.op{i}" for i in range(20_000)] + ["Distributed.all_reduce", "Distributed.all_gather",
                                                       "Distributed.broadcast"]
    (tmp_path / "many.yaml").write_text("api:\n" + "".join(f"  - {api}\n" for api in apis) +
                                        "compare_index:\n  - Max diff\n  - L2norm diff\n  - MeanRelativeErr\n")
    start = time.monotonic()
    assert run_cli(["merge_result", "-i", MERGE / "results", "-o", tmp_path, "-config", tmp_path / "many.yaml"]) == 0
    assert time.monotonic() - start < 30
    assert_same_workbook(only_file(tmp_path, "multi_ranks_compare_merge_*.xlsx"), MERGE / "reference" / "merge.xlsx")
    out = capsys.readouterr().out
    assert "Torch.op9 not found in rank0 compare result." in out
    assert "... and 19990 more APIs not found in rank0 compare result." in out


def test_api_selection_agrees_with_plain_substring_search():
    from msprobe.merge.merge_result import FEW_APIS, ApiSelection

    apis = ["Distributed", "all_reduce", "Torch.add.0", "a", "Functional.linear.0.forward", "x.y"] + \
        [f"Torch.op{i}" for i in range(FEW_APIS)]
    names = ["Distributed.all_reduce.0.forward.output.0", "Torch.add.0.forward.input.0", "Torch.add.10.forward",
             "Functional.linear.0.forward.input.0", "Module.x.y.z", "Tensor.__add__.0.forward", "b.c",
             "Torch.op3.0.forward", "Torch.op30"]
    indexed, plain = ApiSelection(tuple(apis)), ApiSelection(tuple(apis[:FEW_APIS]))
    assert indexed.index is not None and plain.index is None
    for name in names:
        expected = {f"{api}." for api in apis if f"{api}." in name}
        assert indexed.matched(name) == expected and indexed(name) == bool(expected), name


def test_a_csv_cell_longer_than_the_csv_field_limit_is_read(tmp_path):
    """Issue 18 §4: compare's csv with a 3000-frame stack failed with `_csv.Error: field larger than field limit
    (131072)`."""
    row = stat_row("Distributed.all_reduce.0.forward.output.0", "0.5")
    row[STAT_HEADER.index("Err_message")] = "['File x.py, line 1, in f, \\n y = g(x)', " * 6000 + "]"
    assert len(row[STAT_HEADER.index("Err_message")]) > 131072
    folder = write_ranks(tmp_path / "in", [row])
    (tmp_path / "cfg.yaml").write_text("api: [Distributed]\ncompare_index: [Max diff]\n")
    assert run_cli(["merge_result", "-i", folder, "-o", tmp_path / "out", "-config", tmp_path / "cfg.yaml"]) == 0
    sheet = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))["Max diff"]
    assert [c.value for c in sheet[2]] == ["Distributed.all_reduce.0.forward.output.0", 0.5, 0.5]


def test_single_process_results_are_merged_by_their_proc_folder(tmp_path, capsys):
    """compare of a step folder of one proc<pid> folder writes compare_result_proc<pid>_<ts>: merge_result takes it
    (a column per process, after the ranks); one such result alone has nothing to merge it with."""
    for pid, step in ((4242, 0), (97, 1)):
        for side, folder_pid in (("target", pid), ("golden", pid + 1)):
            folder = tmp_path / f"run{pid}" / side / "step0" / f"proc{folder_pid}"
            folder.mkdir(parents=True)
            shutil.copy(FIXTURES / f"stats_L1_step{step}" / side / "dump.json", folder)
        assert run_cli(["compare", "-tp", tmp_path / f"run{pid}" / "target" / "step0", "-gp",
                        tmp_path / f"run{pid}" / "golden" / "step0", "-o", tmp_path / "cmp", "--csv", "-c"]) == 0
    (first,) = (tmp_path / "cmp").glob("compare_result_proc4242_*.csv")
    (tmp_path / "cfg.yaml").write_text("api: [Functional.linear]\ncompare_index: [Max diff]\n")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(first, alone)
    capsys.readouterr()
    assert run_cli(["merge_result", "-i", alone, "-o", tmp_path / "out1", "-config", tmp_path / "cfg.yaml"]) == 1
    assert "Number of compare result is no more than 1" in capsys.readouterr().err
    shutil.copy(next(copy_results(tmp_path, (3,)).glob("*.xlsx")), tmp_path / "cmp")
    assert run_cli(["merge_result", "-i", tmp_path / "cmp", "-o", tmp_path / "out", "-config",
                    tmp_path / "cfg.yaml"]) == 0
    assert "Merging 3 compare results (rank3, proc97, proc4242)." in capsys.readouterr().out
    book = openpyxl.load_workbook(only_file(tmp_path / "out", "*.xlsx"))
    rows = list(book["Max diff"].iter_rows(values_only=True))
    assert rows[0] == ("NPU Name", "rank3", "proc97", "proc4242")
    table = read_csv(first)
    linear = {row[0]: row[table[0].index("Max diff")] for row in table[1:] if row[0].startswith("Functional.linear.")}
    merged = {row[0]: row[3] for row in rows[1:] if row[3] is not None}
    assert merged.keys() == linear.keys() and all(float(merged[n]) == float(linear[n]) for n in linear)
