"""What a DumpConfig selects, framework-free: the entry filters `scope` and `list` and the `data_mode` parts, one
rule for every collector (msprobe.pytorch, msprobe.mindspore)."""

from __future__ import annotations


def selected(config, name: str, enclosing=()) -> bool:
    """Whether entry `name` (an API's or a module's/cell's full forward or backward name) is dumped: it holds one of
    the `scope` substrings (when given) and one of the `list` substrings (when given) or, at level mix, is called
    inside a module or cell (`enclosing`: the names of the module calls open around it) whose name holds one. This
    is how the reference's collectors read `list`, and what `msprobe compare -da`'s next-dump config relies on: the
    culprit API by its full names and its module by its prefix."""
    if config.scope and not any(s in name for s in config.scope):
        return False
    if not config.api_list or any(s in name for s in config.api_list):
        return True
    return config.level == "mix" and any(s in module for module in enclosing for s in config.api_list)


def direction_ok(config, direction: str) -> bool:
    """`data_mode` lets `direction` ("forward" or "backward") through."""
    modes = set(config.data_mode)
    wanted = modes & {"forward", "backward"}
    return "all" in modes or not wanted or direction in wanted


def section_ok(config, section: str) -> bool:
    """`data_mode` lets `section` ("input" or "output") through."""
    modes = set(config.data_mode)
    wanted = modes & {"input", "output"}
    return "all" in modes or not wanted or section in wanted
