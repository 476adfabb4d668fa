"""The entry-name grammar."""

from __future__ import annotations

import pytest

from msprobe.dump.naming import EntryName, renumber_call_direction, split_entry_name
from msprobe.table.safety import is_formula_like


@pytest.mark.parametrize("name, expected", [
    ("Functional.conv2d.1.forward", EntryName("Functional.conv2d", "1.forward", "forward")),
    ("Functional.conv2d.1.backward", EntryName("Functional.conv2d", "1.backward", "backward")),
    ("Module.conv1.Conv2d.forward.0", EntryName("Module.conv1.Conv2d", "forward.0", "forward")),
    ("Cell.network.fc2.Dense.backward.3", EntryName("Cell.network.fc2.Dense", "backward.3", "backward")),
    ("Module.conv1.Conv2d.parameters_grad.0",
     EntryName("Module.conv1.Conv2d.parameters_grad", "parameters_grad", "parameters_grad")),
    ("Module.conv1.Conv2d.parameters_grad", EntryName("Module.conv1.Conv2d", "parameters_grad", "parameters_grad")),
    ("Primitive.conv2d.Conv2d.0.forward", EntryName("Primitive.conv2d.Conv2d", "0.forward", "forward")),
    ("Jit.AlexNet.0.forward", EntryName("Jit.AlexNet", "0.forward", "forward")),
])
def test_split_entry_name(name, expected):
    assert split_entry_name(name) == expected


@pytest.mark.parametrize("name", ["garbage", "a.b", "Functional.relu.0.sideways", ""])
def test_unknown_shapes_are_skipped(name):
    assert split_entry_name(name) is None


def test_debug_names_are_kept_whole():
    assert split_entry_name("x2.0.debug", debug=True) == EntryName("x2.0.debug", "x2.0.debug", "x2.0.debug")


def test_renumber():
    assert renumber_call_direction("7.backward", 0) == "0.backward"
    assert renumber_call_direction("backward.7", 2) == "backward.2"


@pytest.mark.parametrize("text, bad", [("=cmd", True), ("+1+1", True), ("@SUM(A1)", True), ("a;=b", True),
                                       ("-1.5", False), ("-inf", False), ("Functional.add", False),
                                       ("\uff1dcmd", True), ("1;-2", False), ("a;-b", True), ("\uff20x", True),
                                       # no spreadsheet runs a cell starting with %: a benign stack line passes
                                       ("%x", False), ('print("loss %s;%s" % (a, b))', False)])
def test_formula_like(text, bad):
    assert is_formula_like(text) is bad
