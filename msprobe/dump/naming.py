"""The entry-name grammar of dump.json (spec compare.md §2.3, §3.3-3.4): split names and renumber backward calls."""

from __future__ import annotations

from typing import NamedTuple

from msprobe.names import counter

FORWARD = "forward"
BACKWARD = "backward"
PARAMETERS_GRAD = "parameters_grad"

# A text starting with a formula character, or containing ';' followed by one (spec §7.3).


class EntryName(NamedTuple):
    op_no_number: str   # entry name without call count and direction
    call_direction: str  # "0.forward" (API), "forward.0" (module), "parameters_grad" or the name (debug)
    direction: str       # "forward", "backward", "parameters_grad" or the name (debug)


def split_entry_name(name: str, debug: bool = False) -> EntryName | None:
    """Split an entry name; None when the name follows no known shape (such entries are skipped)."""
    if debug:
        return EntryName(name, name, name)
    parts = name.rsplit(".", 2)      # [all but the last two parts, second last, last]
    if len(parts) < 2:
        return None
    last, second = parts[-1], parts[-2]
    if PARAMETERS_GRAD == last or PARAMETERS_GRAD == second:
        return EntryName(name.rpartition(".")[0], PARAMETERS_GRAD, PARAMETERS_GRAD)
    if len(parts) == 3:
        for word in (last, second):
            if word == FORWARD or word == BACKWARD:
                return EntryName(parts[0], f"{second}.{last}", word)
    return None


def renumber_call_direction(call_direction: str, number: int) -> str:
    """Replace the call count inside "N.backward" or "backward.N" by number."""
    first, second = call_direction.split(".", 1)
    if counter(first) is not None:
        return f"{number}.{second}"
    return f"{first}.{number}"


def api_name_of(item_name: str) -> str:
    """Second dot segment of a name ("Torch.empty.0.forward.input.0" -> "empty")."""
    parts = item_name.split(".", 2)
    return parts[1] if len(parts) > 1 else ""


ITEM_STATES = ("input", "output", "parameters_grad", "parameters", "kwargs")


def item_state(name) -> str:
    """The state of a table item from its name: the last of input/output/parameters_grad/parameters/kwargs among
    its parts ("" when none is, or the name is no text)."""
    parts = name.split(".") if isinstance(name, str) else []
    for part in reversed(parts):
        if part in ITEM_STATES:
            return part
    return ""
