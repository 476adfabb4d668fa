"""construct.json of our mix dump against the reference's: module parents and the optimizer/clip_grad phases."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

from tests.pytorch.test_dump import our_dump, train  # noqa: E402

from conftest import FIXTURES  # noqa: E402


def test_construct_parents_match_the_reference(tmp_path):
    train(dump_path=str(tmp_path), debugger_kwargs={"task": "statistics", "level": "mix"})
    ours = json.loads((our_dump(tmp_path) / "construct.json").read_text())
    reference = json.loads((FIXTURES / "stats_mix_step0" / "target" / "construct.json").read_text())
    same = [key for key, parent in reference.items() if key in ours and ours[key] == parent]
    assert len(same) >= 0.95 * len(reference), (len(same), len(reference))
    assert ours["optimizer"] is None and ours["clip_grad"] is None
    assert ours["Torch._foreach_norm.0.forward"] == "clip_grad"
    assert ours["Tensor.__iadd__.0.forward"] == "optimizer"
    assert ours["Functional.linear.0.forward"] == reference["Functional.linear.0.forward"]


def test_stack_lines_are_cached_per_call_site_and_never_conflated():
    from msprobe.collect.stacks import stack_lines
    from msprobe.pytorch.hooks import _HERE

    cache: dict = {}

    def site_a():
        return stack_lines(cache, _HERE)

    def site_b():
        return stack_lines(cache, _HERE)

    first, again = [site_a() for _ in range(2)]     # one call site, twice
    other = site_b()
    assert first is again                       # same chain of positions: the cached tuple
    one, two = site_a(), site_a()               # two positions on one line of the caller: the same lines
    assert one == two and one[0] == first[0]
    assert first != other and "in site_a" in first[0] and "in site_b" in other[0]
    assert first[0].startswith("File ") and "test_construct.py" in first[0] and ", \n " in first[0]
