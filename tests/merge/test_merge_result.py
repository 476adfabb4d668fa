"""merge_result: the reference's own multi-rank results merged into the same workbook, plus what we add."""

from __future__ import annotations

import csv
import shutil
import zipfile

import openpyxl
import pytest

from msprobe.report import readers

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


@pytest.mark.parametrize("fmt", ["--csv", "--xlsx"])
def test_our_compare_results_merge_the_same(fmt, multirank_step0, tmp_path):
    target, golden = multirank_step0
    assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path / "cmp", fmt, "-c"]) == 0
    assert run_cli(["merge_result", "-i", tmp_path / "cmp", "-o", tmp_path / "out", "-config",
                    MERGE / "merge_config_all_index.yaml"]) == 0
    assert_same_workbook(only_file(tmp_path / "out", "*.xlsx"), MERGE / "reference" / "merge_all_index.xlsx")


def test_consistency_sheet_names_the_rank_whose_collective_output_differs(multirank_step0, tmp_path):
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
    from msprobe.report.table import ResultTable
    from msprobe.report.xlsx_writer import write_xlsx

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
