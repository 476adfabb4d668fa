"""msprobe/collect/stacks.py and filters.py (added with the MindSpore collector): the stack lines of stack.json and
the config's entry filters."""

from __future__ import annotations

import os

from msprobe.collect.config import load_config
from msprobe.collect.filters import direction_ok, section_ok, selected
from msprobe.collect.stacks import stack_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def _site(cache, own):
    # the stack starts at the line that calls stack_lines
    return stack_lines(cache, own)


def test_stack_lines_start_at_the_caller_and_skip_the_collectors_own_frames():
    cache: dict = {}
    lines = _site(cache, "/nowhere")
    assert lines[0].startswith(f"File {__file__}, line ") and lines[0].endswith("return stack_lines(cache, own)")
    assert ", in _site, \n " in lines[0] and ", in test_stack_lines_start" in lines[1]
    assert all(not line.startswith(f"File {__file__}") for line in _site({}, HERE))   # this folder is "ours"
    again = [_site(cache, "/nowhere") for _ in range(3)]              # one call site: formatted once, cached
    assert again[0] == again[1] == again[2] != lines and len(cache) == 2


def test_stack_lines_leave_out_every_frame_of_the_msprobe_package():
    """The wrappers `msprobe triage` injects around a model's calls (msprobe/triage/inject.py) sit between the
    user's frames: stack.json, and so triage's answer, shows the user's code only."""
    import msprobe

    wrapper = os.path.join(os.path.dirname(os.path.abspath(msprobe.__file__)), "triage", "wrapper_for_test.py")
    scope: dict = {"_site": _site}
    exec(compile("def wrapped(cache):\n    return _site(cache, '/nowhere')\n", wrapper, "exec"), scope)
    lines = scope["wrapped"]({})
    assert lines[0].startswith(f"File {__file__}, line ") and ", in _site, \n " in lines[0]
    assert not any(wrapper in line for line in lines) and ", in test_stack_lines_leave_out" in lines[1]


def test_filters(tmp_path):
    config = load_config(dump_path=str(tmp_path), scope=["fc1"], list=["Mint.add"], data_mode=["backward", "input"])
    assert selected(config, "Mint.add.0.fc1")
    assert not selected(config, "Mint.mul.0.fc1")                    # not in the list
    assert not selected(config, "Cell.fc1.Dense.forward.0")          # cells are listed by name too
    assert not selected(config, "Mint.add.0.fc2")                    # out of scope
    # `list` as the reference reads it: full entry names pick one direction; at level mix a listed module (or cell)
    # brings every API called inside it
    culprit = load_config(dump_path=str(tmp_path), level="mix",
                          list=["Functional.conv2d.1.forward", "Module.conv2.Conv2d."])
    assert selected(culprit, "Functional.conv2d.1.forward") and not selected(culprit, "Functional.conv2d.1.backward")
    assert selected(culprit, "Module.conv2.Conv2d.forward.0")
    inside = ["Module.layer.Seq.forward.0", "Module.conv2.Conv2d.forward.0"]
    assert selected(culprit, "Torch.add.3.forward", inside) and not selected(culprit, "Torch.add.3.forward")
    l1 = load_config(dump_path=str(tmp_path), level="L1", list=["Module.conv2.Conv2d."])
    assert not selected(l1, "Torch.add.3.forward", inside)           # only at mix
    # a full name selects that entry only, a prefix starts the name (issue 34: `Functional.silu.0.forward` also
    # dumped MintFunctional.silu.0, and `Distributed.` MintDistributed's collectives)
    exact = load_config(dump_path=str(tmp_path), level="mix",
                        list=["Functional.silu.0.forward", "Distributed.all_reduce.0.backward", "Cell.a.Dense.",
                              "Module.b.Linear.forward.0", "Module.c.Linear.parameters_grad"])
    for other in ("MintFunctional.silu.0.forward", "MintDistributed.all_reduce.0.backward", "Cell.x.Cell.a.Dense.forward.0",
                  "Module.b.Linear.forward.01", "Module.xc.Linear.parameters_grad", "Functional.silu.0.forward.x"):
        assert not selected(exact, other), other
    assert not selected(exact, "Mint.add.0.forward", ["Cell.x.Cell.a.Dense.forward.0"])
    for own in ("Functional.silu.0.forward", "Distributed.all_reduce.0.backward", "Cell.a.Dense.backward.0",
                "Module.b.Linear.forward.0", "Module.c.Linear.parameters_grad"):
        assert selected(exact, own), own
    assert selected(exact, "Mint.add.0.forward", ["Cell.a.Dense.forward.0"])
    # keywords are still substrings, as the reference reads them
    keywords = load_config(dump_path=str(tmp_path), list=["relu", "conv."])
    assert all(selected(keywords, n) for n in ("Functional.leaky_relu.0.forward", "Torch.conv.0.forward"))
    assert direction_ok(config, "backward") and not direction_ok(config, "forward")
    assert section_ok(config, "input") and not section_ok(config, "output")
    everything = load_config(dump_path=str(tmp_path))
    assert all(direction_ok(everything, d) for d in ("forward", "backward"))
    assert all(section_ok(everything, s) for s in ("input", "output"))
