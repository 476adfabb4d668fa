"""`msprobe code_mapping` end to end: the refdata kernel dump against the reference's own output, scope
matching (spec §3), short names (§4), statistics mode (§5, DECISIONS 21) and bad input."""

from __future__ import annotations

import csv
import os
import stat

import pytest
from docs_text import DOCS, blocks_after, log_lines, missing_lines

from msprobe.code_mapping.bind import ScopeIndex, code_stack
from msprobe.code_mapping.ir_parser import IRNode

from conftest import FIXTURES, only_file, read_csv, run_cli

HERE = FIXTURES / "code_mapping"
TOY = HERE / "toy_graph.ir"
MATMUL = "MatMul.Default_net-ToyNet_dense-Dense_MatMul-op0.2.10.1700000000.output.0.DefaultFormat.npy"
RELU_GRAD = ("ReluGrad.Gradients_Default_net-ToyNet_gradReLU_ReluGrad-op2.2.10.1700000001.input.0."
             "DefaultFormat.npy")
RELU = "ReLU.Default_net-ToyNet_ReLU-op1.2.10.1700000002.output.0.DefaultFormat.npy"
HEADER = ["File Path", "Code Stack", "Scope Name"]


def reference_rows(name: str) -> dict:
    """Base name of the .npy file -> (Code Stack, Scope Name) of a reference output in the fixtures."""
    rows = read_csv(HERE / name)
    assert rows[0] == HEADER
    return {os.path.basename(row[0]): (row[1], row[2]) for row in rows[1:]}


def make_dump(directory, names) -> str:
    """Only the names of the files matter to code_mapping (spec §4): empty files stand in for the tensors."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")
    return str(directory)


def our_rows(output) -> dict:
    path = only_file(output, "code_mapping_*.csv")
    rows = read_csv(path)
    assert rows[0] == HEADER
    return {os.path.basename(row[0]): (row[1], row[2]) for row in rows[1:]}


@pytest.mark.parametrize("ir, reference", [
    ("graph_build_0_0094.ir.gz", "reference_graph_build.csv.gz"),
    ("ms_output_trace_code_graph_0.ir.gz", "reference_trace_code.csv.gz"),
])
def test_refdata_kernel_dump_matches_the_reference(tmp_path, ir, reference):
    """Acceptance: all 1178 rows of the reference (mindstudio-probe 8.3.3) output, by file base name, with
    the same Scope Name and Code Stack. No difference is expected: on this MindSpore 2.10 IR every Gradients
    node carries its own forward-candidate lines, which the backward association of spec §2 leaves in place
    (ir_parser.link_backward), exactly like the reference."""
    expected = reference_rows(reference)
    assert len(expected) == 1178
    dump = make_dump(tmp_path / "rank_0" / "Net" / "0" / "0", expected)
    assert run_cli(["code_mapping", "--ir", HERE / ir, "--dump_data", dump, "--output", tmp_path / "out"]) == 0
    ours = our_rows(tmp_path / "out")
    assert set(ours) == set(expected)
    differing = [name for name in expected if ours[name] != expected[name]]
    assert differing == []
    empty = sum(1 for code, scope in ours.values() if not scope)
    assert empty == {"reference_graph_build.csv.gz": 95, "reference_trace_code.csv.gz": 151}[reference]
    assert empty == sum(1 for code, scope in expected.values() if not scope)


def test_refdata_summary_and_file_mode(tmp_path, capsys):
    expected = reference_rows("reference_graph_build.csv.gz")
    dump = make_dump(tmp_path / "dump", expected)
    assert run_cli(["-f", "mindspore", "code_mapping", "--ir", HERE / "graph_build_0_0094.ir.gz",
                    "--dump_data", dump, "-o", tmp_path / "out"]) == 0
    out = capsys.readouterr().out
    assert "442 nodes in 1 subgraph(s), 442 with a scope, 92 of them without source lines" in out
    assert "Bound 1083 of 1178 .npy files to IR nodes; 4 of them to nodes without source lines." in out
    assert ("95 .npy files have no IR node (no scope of the IR occurs in their op name; 95 of them Parameter.* "
            "weight files, which no node produces): Parameter.accum_head_bias.") in out
    assert "... (85 more)" in out
    quoted = log_lines(blocks_after(DOCS / "code_mapping.md", "Example on a real L2 dump")[0])   # the doc's figures
    assert len(quoted) == 5 and missing_lines(quoted, out) == []
    path = only_file(tmp_path / "out", "code_mapping_*.csv")
    assert f"The code mapping is saved in: {path}." in out
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert [p.name for p in (tmp_path / "out").iterdir()] == [path.name]      # no temporary file left


def test_toy_dump_as_in_spec_section_4(tmp_path):
    """The example of spec §4: MatMul output, ReluGrad input and 123.npy mapped (mapping.csv) to a ReLU output."""
    dump = os.path.realpath(make_dump(tmp_path / "rank0", [MATMUL, RELU_GRAD, "123.npy"]))
    (tmp_path / "rank0" / "mapping.csv").write_text(f"123.npy,{RELU}\n")
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", dump, "--output", tmp_path / "out"]) == 0
    text = only_file(tmp_path / "out", "code_mapping_*.csv").read_text(encoding="utf-8")
    assert text == (
        "File Path,Code Stack,Scope Name\n"
        f"{dump}/123.npy,\"In file /home/user/toy.py:22, 15~27/        return self.relu(y)\","
        "Default/net-ToyNet/ReLU-op1\n"
        f"{dump}/{MATMUL},\"In file /home/user/toy.py:21, 14~27/        y = self.dense(x)\n"
        "In file /home/user/layers.py:88, 15~40/        return ops.matmul(x, self.w)\","
        "Default/net-ToyNet/dense-Dense/MatMul-op0\n"
        f"{dump}/{RELU_GRAD},\"In file /home/user/toy.py:22, 15~27/        return self.relu(y)\","
        "Gradients/Default/net-ToyNet/gradReLU/ReluGrad-op2\n")


def test_single_npy_file_and_unmapped_short_name(tmp_path, capsys):
    dump = make_dump(tmp_path / "d", [MATMUL, "7.npy"])
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", f"{dump}/{MATMUL}", "-o", tmp_path / "one"]) == 0
    assert list(our_rows(tmp_path / "one")) == [MATMUL]
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", f"{dump}/7.npy", "-o", tmp_path / "short"]) == 0
    assert our_rows(tmp_path / "short") == {"7.npy": ("", "")}
    assert "1 short-named .npy files have no row in their directory's mapping.csv" in capsys.readouterr().out


def node(scope: str, *code: str) -> IRNode:
    return IRNode(key=scope, op="Op", subgraph="g", line=1, scope=scope, code=code)


def test_scope_matching_finds_every_key_in_the_op_name():
    """Spec §3 and §6: every key occurring in the op name matches, by start position, then length; the last
    node of a shared scope wins; a node without lines takes its place as an empty line."""
    nodes = [node("Default/net-Net", "net line"), node("Default/net-Net/MatMul-op0", "old"),
             node("Default/net-Net/MatMul-op0", "matmul line"), node("Default/net-Net/MatMul-op01"),
             node("Expand/_Muls/Mul-op1", "mul line"), node("A", "a line"), node("Default/x-op1", "x"),
             node("", "no scope")]
    index = ScopeIndex(nodes)
    matched = index.match("Expand__Muls_Mul-op1_Default_net-Net_MatMul-op01_A")
    assert [n.scope for n in matched] == ["Expand/_Muls/Mul-op1", "Default/net-Net", "Default/net-Net/MatMul-op0",
                                          "Default/net-Net/MatMul-op01", "A"]
    assert code_stack(matched) == ("mul line\nnet line\nmatmul line\n\na line",
                                   "Expand/_Muls/Mul-op1\nDefault/net-Net\nDefault/net-Net/MatMul-op0\n"
                                   "Default/net-Net/MatMul-op01\nA")
    assert index.match("Default_net-Ne") == ()
    assert index.match("") == ()
    assert index.match("layers_1_attn_proj_weight") == ()


def test_scope_matching_agrees_with_brute_force():
    scopes = ["Default/a", "Default/a/b-op1", "Default/a/b-op12", "Gradients/Default/a/b-op1", "b", "op1",
              "Default/ab", "Defaul", "a/b"]
    index = ScopeIndex([node(s) for s in scopes])
    keys = {s.replace("/", "_"): s for s in scopes}
    for name in ["Gradients_Default_a_b-op12", "xDefault_ab_op1", "Default_a_b-op1Default_a", "bbb", "Defau"]:
        brute = sorted(((i, len(k)), keys[k]) for k in keys for i in range(len(name)) if name.startswith(k, i))
        assert [n.scope for n in index.match(name)] == [scope for _, scope in brute], name


STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
               "Avg Value,L2Norm Value\n")


def test_statistics_mode_writes_an_augmented_copy(tmp_path, capsys):
    """Spec §5 with DECISIONS 21: no index column, the original untouched, the copy in the output directory,
    cells copied as text; MindSpore's trailing comma does not become an 'Unnamed' column."""
    data = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    data.mkdir(parents=True)
    original = (STAT_HEADER +
                "MatMul,Default_net-ToyNet_dense-Dense_MatMul-op0,2,10,1700000000,output,0,32,float32,\"(4, 2)\","
                "1.50,-2,0.1,3e+00,\n"
                "Add,Default_other_Add-op0,3,10,1700000001,input,0,32,float32,\"(4, 2)\",1,1,1,1,\n")
    (data / "statistic.csv").write_text(original)
    before = os.stat(data / "statistic.csv")
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", tmp_path / "dump", "-o", tmp_path / "out"]) == 0
    assert (data / "statistic.csv").read_text() == original
    assert os.stat(data / "statistic.csv").st_mtime_ns == before.st_mtime_ns
    copy = tmp_path / "out" / "rank_0" / "Net" / "0" / "0" / "statistic.csv"
    assert copy.read_text() == (
        STAT_HEADER.rstrip("\n") + ",Code Stack,Scope Name\n"
        "MatMul,Default_net-ToyNet_dense-Dense_MatMul-op0,2,10,1700000000,output,0,32,float32,\"(4, 2)\","
        "1.50,-2,0.1,3e+00,\"In file /home/user/toy.py:21, 14~27/        y = self.dense(x)\n"
        "In file /home/user/layers.py:88, 15~40/        return ops.matmul(x, self.w)\","
        "Default/net-ToyNet/dense-Dense/MatMul-op0\n"
        "Add,Default_other_Add-op0,3,10,1700000001,input,0,32,float32,\"(4, 2)\",1,1,1,1,,\n")
    assert not list((tmp_path / "out").glob("code_mapping_*.csv"))
    out = capsys.readouterr().out
    assert "Bound 1 of 2 statistic.csv rows to IR nodes" in out
    assert "1 statistic.csv rows have no IR node" in out and "Default_other_Add-op0" in out
    # a single statistic.csv given directly: the copy lands in the output directory itself
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", data / "statistic.csv", "-o", tmp_path / "o2"]) == 0
    assert (tmp_path / "o2" / "statistic.csv").read_text() == copy.read_text()


def test_statistics_copy_never_overwrites_the_original(tmp_path, capsys):
    (tmp_path / "statistic.csv").write_text(STAT_HEADER)
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", tmp_path / "statistic.csv"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("msprobe code_mapping: error: the augmented copy of ") and "would overwrite it" in err


def test_statistics_without_op_name_column(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "statistic.csv").write_text("a,b\n1,2\n")
    assert run_cli(["code_mapping", "--ir", TOY, "--dump_data", tmp_path / "d", "-o", tmp_path / "o"]) == 1
    assert "has no 'Op Name' column; it is not a MindSpore statistic.csv." in capsys.readouterr().err


@pytest.mark.parametrize("case, message", [
    ("missing_ir", "msprobe code_mapping: error: --ir nope.ir does not exist.\n"),
    ("missing_dump", "msprobe code_mapping: error: --dump_data nope does not exist.\n"),
    ("empty_dir", "holds no .npy file and no statistic.csv (searched recursively)"),
    ("archive", "is an archive; extract it and pass the directory holding the .npy files or statistic.csv.\n"),
    ("other_file", "is neither a .npy file nor a statistic.csv"),
    ("not_ir", "is not a MindSpore text IR: none of its first 1 line(s)"),
    ("truncated_ir", "is truncated: subgraph @toy_graph_1 (line 14) has no closing '}'"),
])
def test_bad_input_is_one_line(tmp_path, capsys, case, message):
    (tmp_path / "empty").mkdir()
    make_dump(tmp_path / "dump", [MATMUL])
    (tmp_path / "dump.tar.gz").write_bytes(b"\x1f\x8b")
    (tmp_path / "notes.txt").write_text("x\n")
    (tmp_path / "cut.ir").write_text(TOY.read_text()[:TOY.read_text().index("  %1(")])
    ir, dump = str(TOY), str(tmp_path / "dump")
    ir, dump = {"missing_ir": ("nope.ir", dump), "missing_dump": (ir, "nope"), "empty_dir": (ir, tmp_path / "empty"),
                "archive": (ir, tmp_path / "dump.tar.gz"), "other_file": (ir, tmp_path / "notes.txt"),
                "not_ir": (tmp_path / "notes.txt", dump), "truncated_ir": (tmp_path / "cut.ir", dump)}[case]
    assert run_cli(["code_mapping", "--ir", ir, "--dump_data", dump, "-o", tmp_path / "out"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("msprobe code_mapping: error: ") and err.count("\n") == 1
    assert message in err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_csv_quoting_matches_pandas(tmp_path):
    """Cells with commas, quotes or line breaks are quoted, quotes doubled; others are bare (spec §4)."""
    from msprobe.code_mapping.bind import write_outputs

    path = tmp_path / "t.csv"
    write_outputs([(str(path), HEADER, [("/a b.npy", 'x = f(a, "b")', "S/T"), ("/c.npy", "", "")])])
    assert path.read_text() == 'File Path,Code Stack,Scope Name\n/a b.npy,"x = f(a, ""b"")",S/T\n/c.npy,,\n'
    assert list(csv.reader(path.open())) == [HEADER, ["/a b.npy", 'x = f(a, "b")', "S/T"], ["/c.npy", "", ""]]


@pytest.mark.parametrize("mode", ["tensor", "statistic"])
@pytest.mark.parametrize("old, new", [
    ("# In file /home/user/toy.py:21, 14~27/        y = self.dense(x)/", '# =HYPERLINK("http://evil","x")'),
    ("# In file /home/user/toy.py:21, 14~27/        y = self.dense(x)/", "# =cmd|' /C calc'!A0"),
    ("(Default/net-ToyNet/dense-Dense/MatMul-op0)", "(@SUM(1)/Default/net-ToyNet/dense-Dense/MatMul-op0)"),
])
def test_formula_like_code_or_scope_cells_are_refused(tmp_path, capsys, mode, old, new):
    """Issue 18: the Code Stack and Scope Name cells come from the IR and were written unchecked; they are now
    refused as compare refuses formula-like names, before any output file is written."""
    ir = tmp_path / "evil.ir"
    text = TOY.read_text()
    assert old in text
    ir.write_text(text.replace(old, new))
    dump = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    op_name = "Default_net-ToyNet_dense-Dense_MatMul-op0"
    if mode == "tensor":
        make_dump(dump, [MATMUL.replace(op_name, "@SUM(1)_" + op_name)])
    else:
        dump.mkdir(parents=True)
        for sub in ("a", "b"):            # two statistic.csv: neither is written
            (dump / sub).mkdir()
            (dump / sub / "statistic.csv").write_text(
                STAT_HEADER + f"MatMul,@SUM(1)_{op_name},2,10,1700000000,output,0,32,float32,\"(4, 2)\",1,1,1,1,\n")
    assert run_cli(["code_mapping", "--ir", ir, "--dump_data", dump, "--output", tmp_path / "out"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Malicious value" in err[0]
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []
