"""What a DumpConfig selects, framework-free: the entry filters `scope` and `list` and the `data_mode` parts.
Added for the MindSpore collector (msprobe/mindspore); msprobe/pytorch/hooks.py has the same rules of its own."""

from __future__ import annotations


def selected(config, name: str, is_api: bool = True) -> bool:
    """`scope`: some substring in the entry name; `list` (APIs only, not modules or cells): some substring."""
    if config.scope and not any(s in name for s in config.scope):
        return False
    if config.api_list and is_api and not any(s in name for s in config.api_list):
        return False
    return True


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
