"""The MindSpore APIs acc_check replays (spec §3.1): the lists of msprobe/data/acc_check_mindspore_apis.yaml."""

from __future__ import annotations

import functools
import os

from msprobe.acc_check.framework import DATA_DIR

MS_TYPES = {"Mint": "mint", "MintFunctional": "mint_functional", "Tensor": "tensor", "Functional": "functional"}


@functools.lru_cache(maxsize=1)
def ms_support_lists() -> dict:
    """The MindSpore API names of msprobe/data/acc_check_mindspore_apis.yaml, by section."""
    import yaml

    with open(os.path.join(DATA_DIR, "acc_check_mindspore_apis.yaml"), encoding="utf-8") as handle:
        lists = yaml.safe_load(handle)
    return {key: frozenset(lists[key]) for key in MS_TYPES.values()}


def ms_checkable(key: str) -> bool:
    """Spec §3.1: a data key `Type.name….N.direction` of a MindSpore dump is checked when Type is Mint or
    MintFunctional, or Tensor with a name of the Tensor list, or Functional.flash_attention_score."""
    fields = key.split(".")
    if len(fields) < 4:
        return False
    api_type, name = fields[0], ".".join(fields[1:-2])
    if api_type in ("Mint", "MintFunctional"):
        return True
    return api_type in ("Tensor", "Functional") and name in ms_support_lists()[MS_TYPES[api_type]]
