"""The MindSpore text IR parser (spec code_mapping.md §2) on the spec's toy IR, the real MindSpore 2.10 IR and
broken inputs."""

from __future__ import annotations

import gzip
import shutil

import pytest

from msprobe.code_mapping.ir_parser import IRFormatError, parse_ir

from conftest import FIXTURES, run_cli

HERE = FIXTURES / "code_mapping"
TOY = HERE / "toy_graph.ir"
REAL_GZ = HERE / "graph_build_0_0094.ir.gz"


def by_key(graph) -> dict:
    return {node.key: node for node in graph.nodes}


def test_toy_ir_parses_as_the_spec_table():
    graph = parse_ir(str(TOY))
    assert graph.entry == "toy_graph_1"
    assert graph.subgraphs == ["toy_graph_1"]
    assert [node.key for node in graph.nodes] == ["%0&CNode_11", "%1&CNode_12", "%2&CNode_30"]   # Return is none
    nodes = by_key(graph)
    matmul, relu, grad = nodes["%0&CNode_11"], nodes["%1&CNode_12"], nodes["%2&CNode_30"]
    assert (matmul.op, matmul.scope, matmul.unique_id) == ("PrimFunc_MatMul",
                                                          "Default/net-ToyNet/dense-Dense/MatMul-op0", "101")
    assert matmul.code == ("In file /home/user/toy.py:21, 14~27/        y = self.dense(x)",
                           "In file /home/user/layers.py:88, 15~40/        return ops.matmul(x, self.w)")
    assert matmul.inputs == ("%para1_x", "%para2_w")
    assert matmul.line == 15 and matmul.subgraph == "toy_graph_1"
    assert (relu.scope, relu.unique_id, relu.code) == (
        "Default/net-ToyNet/ReLU-op1", "102", ("In file /home/user/toy.py:22, 15~27/        return self.relu(y)",))
    # Backward association (spec §2): the gradient node has no lines of its own and takes the forward node's.
    assert grad.scope == "Gradients/Default/net-ToyNet/gradReLU/ReluGrad-op2"
    assert grad.unique_id == "102"
    assert grad.code == relu.code and grad.code_from == "%1&CNode_12"


def test_gradient_node_with_own_lines_keeps_them(tmp_path):
    text = TOY.read_text().replace(
        "      # Fullname with scope: (Gradients/Default/net-ToyNet/gradReLU/ReluGrad-op2)\n",
        "      # Fullname with scope: (Gradients/Default/net-ToyNet/gradReLU/ReluGrad-op2)\n"
        "      # Corresponding forward node candidate:\n"
        "      # In file /home/user/toy.py:22, 15~27/        return self.relu(y)/\n")
    path = tmp_path / "grad.ir"
    path.write_text(text)
    grad = by_key(parse_ir(str(path)))["%2&CNode_30"]
    assert grad.code == ("Corresponding forward node candidate:",
                         "In file /home/user/toy.py:22, 15~27/        return self.relu(y)")
    assert grad.code_from == ""


def test_real_ir_gzip_and_plain_agree(tmp_path):
    plain = tmp_path / "graph_build_0_0094.ir"
    with gzip.open(REAL_GZ, "rb") as source, open(plain, "wb") as target:
        shutil.copyfileobj(source, target)
    from_gz, from_plain = parse_ir(str(REAL_GZ)), parse_ir(str(plain))
    assert from_gz.lines == from_plain.lines == 6386
    assert from_gz.entry == "kernel_graph0" and from_gz.subgraphs == ["kernel_graph0"]
    # "Total number of cnodes: 443" in the IR header counts the Return node too.
    assert len(from_gz.nodes) == len(from_plain.nodes) == 442
    assert [(n.key, n.scope, n.code) for n in from_gz.nodes] == [(n.key, n.scope, n.code) for n in from_plain.nodes]
    assert sum(1 for n in from_gz.nodes if not n.code) == 92
    # Every Gradients node of this IR carries MindSpore's own forward-candidate lines: none is relinked.
    assert sum(1 for n in from_gz.nodes if n.code_from) == 0
    # Each of the IR's 158 "# Corresponding forward node candidate:" lines lands in exactly one node.
    assert sum(n.code.count("Corresponding forward node candidate:") for n in from_gz.nodes) == 158
    assert sum(1 for n in from_gz.nodes if n.scope.startswith("Gradients") and n.unique_id) == 125


def test_real_ir_argument_list_over_several_lines():
    """%165's first argument is a Tensor value printed over eight lines (IR lines 2032-2039)."""
    node = by_key(parse_ir(str(REAL_GZ)))["%165&equiv_100_loss_weights"]
    assert node.op == "PrimFunc_MaskedFill" and node.line == 2032
    assert node.inputs == ("%158",)
    assert node.scope == "Default/network-GPT/MaskedFill-op2"
    assert node.unique_id == "31234"
    assert node.code[-1].startswith("In file /usr/lib/python3/site-packages/mindspore/")


def test_first_occurrence_of_a_key_wins_and_unknown_lines_are_skipped(tmp_path):
    text = TOY.read_text() + ("\nsome unknown trailer line: 42\n"
                              "subgraph @second() {\n"
                              "  %0(CNode_11) = PrimFunc_Abs(%para1_x)\n"
                              "      # Fullname with scope: (Default/other/Abs-op9)\n"
                              "  %5(CNode_99) = PrimFunc_Neg(%0)\n"
                              "      # Fullname with scope: (Default/other/Neg-op1)\n"
                              "      # In file /home/user/other.py:3, 1~2/x = -y/\n"
                              "}\n")
    (tmp_path / "x.ir").write_text(text)
    graph = parse_ir(str(tmp_path / "x.ir"))
    nodes = by_key(graph)
    assert graph.subgraphs == ["toy_graph_1", "second"]
    assert nodes["%0&CNode_11"].op == "PrimFunc_MatMul"            # the duplicate key in @second is ignored
    assert nodes["%5&CNode_99"].subgraph == "second"
    assert nodes["%5&CNode_99"].code == ("In file /home/user/other.py:3, 1~2/x = -y",)


def test_node_without_scope_line_takes_the_next_one(tmp_path):
    text = ("# IR entry: @g\nsubgraph @g() {\n"
            "  %0(a) = Foo(%para1_x)\n"
            "      : (<Tensor>) -> (<Tensor>)\n"
            "  %1(b) = Bar(%0) cnode_primal_attrs: {unique_id: \"7\"}\n"
            "      # Fullname with scope: (Default/Bar-op0)\n"
            "      # In file /x.py:1, 1~2/y/\n"
            "  %2(c) = Baz(%1)\n"
            "}\n")
    (tmp_path / "g.ir").write_text(text)
    nodes = by_key(parse_ir(str(tmp_path / "g.ir")))
    assert nodes["%0&a"].scope == "Default/Bar-op0" and nodes["%0&a"].code == ()
    assert nodes["%0&a"].unique_id == "7"
    assert nodes["%1&b"].code == ("In file /x.py:1, 1~2/y",)
    assert nodes["%2&c"].scope == "" and nodes["%2&c"].code == ()      # no scope before the closing brace


@pytest.mark.parametrize("content, message", [
    (b"", "is empty, not a MindSpore text IR"),
    (b"hello\nworld\n", "is not a MindSpore text IR: none of its first 2 line(s)"),
    (b"\x00\x01binary", "holds binary data, not a MindSpore text IR."),
])
def test_not_an_ir(tmp_path, content, message):
    path = tmp_path / "bad.ir"
    path.write_bytes(content)
    with pytest.raises(IRFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_ir(str(path))


def test_truncated_ir_and_truncated_gzip(tmp_path):
    text = gzip.decompress(REAL_GZ.read_bytes())
    cut = tmp_path / "cut.ir"
    cut.write_bytes(text[:300000])
    with pytest.raises(IRFormatError, match=r"is truncated: subgraph @kernel_graph0 \(line 113\) has no closing"):
        parse_ir(str(cut))
    inside_args = tmp_path / "args.ir"
    inside_args.write_bytes(text[:text.index(b"[[ 1.00000000e+00]") + 10])
    with pytest.raises(IRFormatError, match=r"argument list of node %165&equiv_100_loss_weights \(line 2032\)"):
        parse_ir(str(inside_args))
    cut_gz = tmp_path / "cut.ir.gz"
    cut_gz.write_bytes(REAL_GZ.read_bytes()[:20000])
    with pytest.raises(IRFormatError, match="is a damaged or truncated gzip file"):
        parse_ir(str(cut_gz))
    archive = tmp_path / "dump.tar.gz"
    archive.write_bytes(gzip.compress(b"l2_tensor/\x00\x00\x00ustar"))
    with pytest.raises(IRFormatError, match=r"an archive\? extract the .ir file from it"):
        parse_ir(str(archive))


@pytest.mark.parametrize("lines", [1, 2, 7, 40, 112])
def test_ir_cut_inside_its_header_is_incomplete(tmp_path, capsys, lines):
    """Issue 18: an IR cut before its first subgraph gave exit 0 and 0 nodes."""
    text = gzip.decompress(REAL_GZ.read_bytes()).decode()
    cut = tmp_path / "cut.ir"
    cut.write_text("".join(text.splitlines(keepends=True)[:lines]))
    with pytest.raises(IRFormatError, match=f"is incomplete: it ends at line {lines}, inside its header"):
        parse_ir(str(cut))
    (tmp_path / "x.npy").write_bytes(b"")
    assert run_cli(["code_mapping", "--ir", cut, "--dump_data", tmp_path / "x.npy", "-o", tmp_path / "out"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is incomplete" in err


def test_fewer_subgraphs_than_the_header_declares_is_warned(tmp_path, capsys):
    ir = tmp_path / "g.ir"
    ir.write_text(TOY.read_text().replace("# Total subgraphs: 1", "# Total subgraphs: 3"))
    (tmp_path / "x.npy").write_bytes(b"")
    assert run_cli(["code_mapping", "--ir", ir, "--dump_data", tmp_path / "x.npy", "-o", tmp_path / "out"]) == 0
    assert "declares 3 subgraphs in its header but holds 1; it may be incomplete." in capsys.readouterr().out


PATHOLOGICAL = {
    # issue 28: a node line ending in `#scope:` 1,400 times (11 KB) took ~230 s, cubic in its length
    "scope": "  %0(CNode_11) = PrimFunc_MatMul(%para1_x, %para2_w) " + "#scope:" * 1400,
    "node": "  %1(" + ")=" * 8000,                                              # was quadratic
    "primal attributes": "  %0(CNode_11) = PrimFunc_MatMul(%para1_x) " + "cnode_primal_attrs: {unique_id" * 8000,
    "scope comment": "      # Fullname with scope: " + ":(" * 8000,
}


@pytest.mark.parametrize("kind", list(PATHOLOGICAL))
def test_a_pathological_line_is_parsed_in_linear_time(tmp_path, kind):
    """Every pattern applied to the IR's text runs in linear time: a line built to make a backtracking pattern
    explode is read in well under a second (in a child process, so that a regression fails by its timeout
    instead of hanging the suite)."""
    import subprocess
    import sys

    lines = TOY.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if "%0(CNode_11)" in line)
    path = tmp_path / "hostile.ir"
    path.write_text("\n".join(lines[:at] + [PATHOLOGICAL[kind]] + lines[at:]))
    code = ("import sys, time; from msprobe.code_mapping.ir_parser import parse_ir; t = time.process_time(); "
            "graph = parse_ir(sys.argv[1]); print(time.process_time() - t, len(graph.nodes))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    seconds, nodes = done.stdout.split()
    assert float(seconds) < 0.5 and int(nodes) >= 3, done.stdout


def test_scope_and_primal_attributes_are_found_as_the_patterns_found_them():
    from msprobe.code_mapping.ir_parser import primal_attrs, scope_in

    assert scope_in("  # Fullname with scope: (Default/a-A/MatMul-op0)") == "Default/a-A/MatMul-op0"
    assert scope_in("x) # my SCOPE label :  (a/b) (c)") == "a/b"
    assert scope_in("#scope:#scope: (x)") == "x"
    assert scope_in("# no scope here (x)") is None and scope_in("#scope: (x") is None
    assert scope_in("  # Fullname with scope: (a)", at_start=True) is None
    assert scope_in("# Fullname with scope: (a)", at_start=True) == "a"
    assert list(primal_attrs('a cnode_primal_attrs: {unique_id: "1"} b cnode_primal_attrs:{x} {y}')) == [
        'unique_id: "1"', "x"]
    assert list(primal_attrs("cnode_primal_attrs: {open")) == []


def test_scope_in_agrees_with_the_pattern_on_random_lines():
    import random
    import re

    from msprobe.code_mapping.ir_parser import primal_attrs, scope_in

    scope = re.compile(r"#.*?scope.*?:\s*\((.*?)\)", re.IGNORECASE)
    attrs = re.compile(r"cnode_primal_attrs:\s*\{([^}]*)\}")
    pieces = ["#", "scope", "ScOpE", ":", " ", "\t", "(", ")", "x", "{", "}", "cnode_primal_attrs:"]
    rng = random.Random(28)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        found = scope.search(text)
        assert scope_in(text) == (found.group(1) if found else None), text
        found = scope.match(text)
        assert scope_in(text, at_start=True) == (found.group(1) if found else None), text
        assert list(primal_attrs(text)) == attrs.findall(text), text
