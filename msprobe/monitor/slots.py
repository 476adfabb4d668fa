"""The names of the tensors a module (cell) call takes and returns, as the monitor's rows name them, the same for
every framework: one value -> `input` / `output`; several -> `input_0`, `input_1`, ... (the reference's names); a
container's tensors get their index path (`output_1_y`), a positional value that is no tensor a slot of its own
with None; tensor keyword arguments follow as `input_<key>`. At most MAX_SLOTS per side of a call."""

from __future__ import annotations

MAX_SLOTS = 64          # tensors taken per side of a call (inputs, outputs)
_MAX_DEPTH = 4


def slots(values: list, kind: str, is_tensor, kwargs: dict | None = None) -> list:
    """[(label, tensor or None)] of a call's side; `is_tensor(value)` tells the framework's tensors."""
    found: list = []
    single = len(values) == 1
    for i, value in enumerate(values):
        label = kind if single else f"{kind}_{i}"
        if is_tensor(value):
            found.append((label, value))
        elif isinstance(value, (tuple, list, dict)):
            before = len(found)
            _leaves(value, label, found, 1, is_tensor)
            if len(found) == before:
                found.append((label, None))
        else:
            found.append((label, None))
        if len(found) >= MAX_SLOTS:
            return found[:MAX_SLOTS]
    for key, value in (kwargs or {}).items():
        if is_tensor(value) or isinstance(value, (tuple, list, dict)):
            _leaves(value, f"{kind}_{key}", found, 1, is_tensor)
    return found[:MAX_SLOTS]


def _leaves(value, label: str, found: list, depth: int, is_tensor) -> None:
    if is_tensor(value):
        found.append((label, value))
    elif depth <= _MAX_DEPTH and isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _leaves(item, f"{label}_{i}", found, depth + 1, is_tensor)
    elif depth <= _MAX_DEPTH and isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{label}_{key}", found, depth + 1, is_tensor)
