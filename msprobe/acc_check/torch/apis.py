"""The PyTorch APIs acc_check replays: the lists of msprobe/data/acc_check_pytorch_apis.yaml, the names never
replayed, and how a dump's API name reads. Importing it imports no torch."""

from __future__ import annotations

import functools
import os

from msprobe.acc_check.framework import DATA_DIR

BLACK_LIST = {"to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_with_format"}
SKIP_PREFIXES = ("Distributed", "MindSpeed")


@functools.lru_cache(maxsize=1)
def support_lists() -> dict:
    import yaml

    path = os.path.join(DATA_DIR, "acc_check_pytorch_apis.yaml")
    with open(path, encoding="utf-8") as handle:
        lists = yaml.safe_load(handle)
    return {"Functional": set(lists["functional"]), "Tensor": set(lists["tensor"]), "Torch": set(lists["torch"])}


def parse_api(full_name: str):
    """(api_type, api_name) of 'Type.name.N' or 'Type.p.name.N', or None when not replayable."""
    parts = full_name.split(".")
    if parts[0] in SKIP_PREFIXES:
        return None
    if len(parts) == 3:
        return parts[0], parts[1]
    if len(parts) == 4:
        return parts[0], f"{parts[1]}.{parts[2]}"
    return None
