"""What a DumpConfig selects, framework-free: the entry filters `scope` and `list` and the `data_mode` parts, one
rule for every collector (msprobe.pytorch, msprobe.mindspore)."""

from __future__ import annotations

import functools
import re

# a full entry name: an API call's `<type>.<api>.<n>.forward|backward`, a module's `...forward|backward.<n>` or
# `...parameters_grad`
_FULL_NAME = re.compile(r"\.\d+\.(forward|backward)$|\.(forward|backward)\.\d+$|\.parameters_grad$")


def holds(name: str, item: str) -> bool:
    """Whether entry `name` is selected by one `list` (or `scope`) item. A full entry name selects that entry only:
    an API call's `Functional.silu.0.forward`/`.backward` (not `MintFunctional.silu.0.forward`), a module's or
    cell's `Module.conv2.Conv2d.forward.0` or `...parameters_grad`. An item that starts like an entry name (with a
    capital) and ends in `.` is a prefix (`Module.conv2.Conv2d.`: that module's forward, backward and parameter
    gradients; `Functional.`: every torch.nn.functional API, not MintFunctional's). Any other item is a keyword
    that selects every name holding it (`relu`: every API with relu in its name)."""
    if item.endswith(".") and item[:1].isupper():
        return name.startswith(item)
    if _FULL_NAME.search(item):
        return name == item
    return item in name


def selected(config, name: str, enclosing=()) -> bool:
    """Whether entry `name` (an API's or a module's/cell's full forward or backward name) is dumped: one of the
    `scope` items holds it (when given) and one of the `list` items (when given) or, at level mix, one holds a
    module or cell called around it (`enclosing`: the names of the module calls open around it); see `holds`. This
    is how the reference's collectors read keywords, and what `msprobe compare -da`'s next-dump config relies on:
    the culprit API by its full names and its module by its prefix, and nothing else."""
    if config.scope and not any(holds(name, s) for s in config.scope):
        return False
    if not config.api_list or any(holds(name, s) for s in config.api_list):
        return True
    return config.level == "mix" and any(holds(module, s) for module in enclosing for s in config.api_list)


def direction_ok(config, direction: str) -> bool:
    """`data_mode` lets `direction` ("forward" or "backward") through."""
    return _lets_through(tuple(config.data_mode), ("forward", "backward"), direction)


def section_ok(config, section: str) -> bool:
    """`data_mode` lets `section` ("input" or "output") through."""
    return _lets_through(tuple(config.data_mode), ("input", "output"), section)


@functools.lru_cache(maxsize=256)
def _lets_through(data_mode: tuple, kinds: tuple, value: str) -> bool:
    """Whether `data_mode` lets `value`, one of `kinds`, through (asked per recorded call: remembered)."""
    modes = set(data_mode)
    wanted = modes & set(kinds)
    return "all" in modes or not wanted or value in wanted
