#!/usr/bin/env python3
"""Generate msprobe/data/ms_to_pt_api.yaml, the built-in MindSpore -> PyTorch API table of `msprobe compare -am`.

The table (spec compare.md §3.9.1) is a flat YAML dict `MindSporeName: PyTorchName` of dump names
`{api_type}.{api_name}`.  MindSpore side: `Functional.<name>` = `mindspore.ops.<name>`, `Tensor.<name>` = method
of `mindspore.Tensor`.  PyTorch side: `Torch.<name>` = `torch.<name>`, `Functional.<name>` =
`torch.nn.functional.<name>`, `Tensor.<name>` = method of `torch.Tensor`.  `Mint.*` / `MintFunctional.*` are
handled by a rule in msprobe/compare/mapping.py and are not part of the table.

It is derived only by introspecting the two installed frameworks (MindSpore 2.10.0, torch 2.13.0), which need a
separate environment (MindSpore requires numpy<2):

    python3 -m venv /tmp/msvenv && /tmp/msvenv/bin/pip install mindspore==2.10.0 "numpy<2" torch==2.13.0
    /tmp/msvenv/bin/python tools/gen_api_table.py -o msprobe/data/ms_to_pt_api.yaml

Rules (applied in this order; every choice is listed in the constants below):

Functional keys -- public functions of `mindspore.ops` (`inspect.isfunction`, name not starting with `_`;
primitives, classes and modules are not dumped as Functional and are skipped):
  F1. RENAMES: the ten semantic renames (dense -> linear, equal -> eq, ...) win over everything else.
  F2. EXCLUDED_FUNCTIONAL: same name on both sides but a different operation -> no entry.
  F3. the name exists in torch.nn.functional and as a torch function -> `Functional.<name>` (msprobe's PyTorch
      dump records the common call F.softmax / F.embedding / F.layer_norm / F.conv2d / F.relu / F.dropout as
      Functional.*, see tests/fixtures/stats_L1_step0), except TORCH_PREFERRED (plain element-wise math that
      PyTorch code calls as torch.sigmoid / torch.tanh) -> `Torch.<name>`.
  F4. only a torch function (`torch.<name>`, callable, not a class/module, not a removed stub) -> `Torch.<name>`.
  F5. only torch.nn.functional has it -> `Functional.<name>` (gelu, cross_entropy, pad, interpolate, losses...).
  F6. only `torch.linalg.<name>` has it (torch.eig / torch.lstsq are removed stubs, so linalg's count)
      -> `Torch.<name>`: msprobe's PyTorch dump records torch.linalg calls with the Torch prefix
      (torch.linalg.vector_norm appears as Torch.vector_norm in the fixture dump).  torch.fft and
      torch.special are not used (no evidence of how a PyTorch dump names them).
  Names in none of these namespaces (shape, bias_add, cast, ...) get no entry: there is nothing to compare with.

Tensor keys -- public methods of `mindspore.Tensor` (functions / method descriptors; properties, attributes and
static methods are not API calls):
  T1. RENAMES win (asnumpy -> numpy, gather_elements -> gather, swapaxes -> transpose, ...).
  T2. EXCLUDED_TENSOR: same name, different operation -> no entry.
  T3. `torch.Tensor` has a callable method of the same name (not a property such as torch's `real`/`imag`)
      -> `Tensor.<name>`.
  Dunder methods (`__add__`, ...) are not in the table: their dump names are identical on both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import re
import sys

EXPECTED_VERSIONS = {"mindspore": "2.10.0", "torch": "2.13.0"}

# The ten semantic renames (MindSpore name -> PyTorch name).  They override every other rule.
RENAMES = {
    "Functional.bidense": "Functional.bilinear",
    "Functional.dense": "Functional.linear",
    "Functional.equal": "Torch.eq",             # ops.equal is element-wise; torch.equal returns one bool
    "Functional.swapaxes": "Torch.transpose",
    "Tensor.asnumpy": "Tensor.numpy",
    "Tensor.cauchy": "Tensor.cauchy_",
    "Tensor.equal": "Tensor.eq",                # same reason as Functional.equal
    "Tensor.fill_diagonal": "Tensor.fill_diagonal_",
    "Tensor.gather_elements": "Tensor.gather",
    "Tensor.swapaxes": "Tensor.transpose",
}

# Rule F3 exception: present in torch and torch.nn.functional, but PyTorch code calls the torch function.
TORCH_PREFERRED = {
    "sigmoid": "torch.sigmoid is the usual call; F.sigmoid only forwards to Tensor.sigmoid",
    "tanh": "torch.tanh is the usual call; F.tanh only forwards to Tensor.tanh",
}

# Rule F2: same name in mindspore.ops and PyTorch, different operation.
EXCLUDED_FUNCTIONAL = {
    "cond": "ops.cond is the matrix condition number; torch.cond is control flow",
    "fill": "ops.fill(type, shape, value) creates a tensor; torch.fill(input, value) fills one",
    "gather": "ops.gather(params, indices, axis) is an index_select; torch.gather is ops.gather_elements",
    "inv": "ops.inv is the element-wise reciprocal; torch.linalg.inv is the matrix inverse",
    "range": "ops.range excludes `end`; the deprecated torch.range includes it",
    "scatter_add": "ops.scatter_add(x, indices, updates) scatters along axis 0; torch.scatter_add takes dim",
    "select": "ops.select(cond, x, y) is where(); torch.select(input, dim, index) slices",
    "transpose": "ops.transpose(x, perm) permutes all axes; torch.transpose swaps two",
    "vmap": "a function transform, not an operator",
}

# Rule T2: same method name on both Tensor classes, different operation.
EXCLUDED_TENSOR = {
    "index": "mindspore Tensor.index(indices) indexes by a tensor tuple; torch Tensor.index binds functorch dims",
    "lstsq": "torch Tensor.lstsq is a removed stub that only raises (use torch.linalg.lstsq)",
    "unfold": "mindspore Tensor.unfold is im2col; torch Tensor.unfold(dim, size, step) is a sliding view",
}

# torch functions that exist only to raise "removed" errors (torch.eig, torch.lstsq, ...).
REMOVED_TORCH_MODULE = "torch._linalg_utils"

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$")


def import_frameworks():
    """Import mindspore and torch with their import-time chatter kept off stdout (stdout is the YAML)."""
    with contextlib.redirect_stdout(sys.stderr):
        import mindspore
        import mindspore.ops
        import torch
        import torch.nn.functional
    return mindspore, torch


def base_version(version: str) -> str:
    return version.split("+")[0]


def is_plain_callable(obj) -> bool:
    """A function-like object: callable but not a class, module or removed-API stub."""
    if obj is None or not callable(obj) or inspect.isclass(obj) or inspect.ismodule(obj):
        return False
    return getattr(obj, "__module__", None) != REMOVED_TORCH_MODULE


def functional_entries(ms_ops, torch) -> dict:
    functional = torch.nn.functional
    table = {}
    for name in sorted(dir(ms_ops)):
        if name.startswith("_") or not inspect.isfunction(getattr(ms_ops, name)):
            continue
        key = f"Functional.{name}"
        if key in RENAMES or name in EXCLUDED_FUNCTIONAL:
            continue
        in_torch = is_plain_callable(getattr(torch, name, None))
        in_functional = is_plain_callable(getattr(functional, name, None))
        if in_torch and in_functional:
            table[key] = f"Torch.{name}" if name in TORCH_PREFERRED else f"Functional.{name}"
        elif in_torch:
            table[key] = f"Torch.{name}"
        elif in_functional:
            table[key] = f"Functional.{name}"
        elif is_plain_callable(getattr(torch.linalg, name, None)):
            table[key] = f"Torch.{name}"
    return table


def is_method(cls, name: str) -> bool:
    """A callable method of cls (not a property, data descriptor, static method or plain attribute)."""
    raw = inspect.getattr_static(cls, name, None)
    if raw is None or isinstance(raw, (property, staticmethod, classmethod)):
        return False
    if inspect.isdatadescriptor(raw) or inspect.isgetsetdescriptor(raw) or inspect.ismemberdescriptor(raw):
        return False
    return callable(raw)


def tensor_entries(ms_tensor, pt_tensor) -> dict:
    table = {}
    for name in sorted(dir(ms_tensor)):
        if name.startswith("_") or not is_method(ms_tensor, name):
            continue
        key = f"Tensor.{name}"
        if key in RENAMES or name in EXCLUDED_TENSOR:
            continue
        if is_method(pt_tensor, name):
            table[key] = f"Tensor.{name}"
    return table


def check_renames(mindspore, torch) -> None:
    """Every rename must name a real API on both sides, or the table would point at nothing."""
    sides = {
        "ms": {"Functional": mindspore.ops, "Tensor": mindspore.Tensor},
        "pt": {"Torch": torch, "Functional": torch.nn.functional, "Tensor": torch.Tensor},
    }
    for ms_name, pt_name in RENAMES.items():
        for side, dump_name in (("ms", ms_name), ("pt", pt_name)):
            api_type, api_name = dump_name.split(".", 1)
            if not callable(getattr(sides[side][api_type], api_name, None)):
                raise SystemExit(f"gen_api_table: rename {ms_name} -> {pt_name}: {dump_name} does not exist")


def build_table(mindspore, torch) -> dict:
    check_renames(mindspore, torch)
    table = functional_entries(mindspore.ops, torch)
    table.update(tensor_entries(mindspore.Tensor, torch.Tensor))
    table.update(RENAMES)
    for key, value in table.items():
        if not NAME.match(key) or not NAME.match(value):
            raise SystemExit(f"gen_api_table: unexpected name {key!r}: {value!r}")
    return dict(sorted(table.items()))


def count_by_prefix(names) -> str:
    counts = {}
    for name in names:
        prefix = name.split(".", 1)[0]
        counts[prefix] = counts.get(prefix, 0) + 1
    return ", ".join(f"{prefix} {counts[prefix]}" for prefix in sorted(counts))


def render(table: dict, ms_version: str, torch_version: str) -> str:
    lines = [
        "# Built-in MindSpore -> PyTorch API dump-name table for `msprobe compare -am` (spec compare.md §3.9.1).",
        f"# Generated by tools/gen_api_table.py from mindspore {ms_version} and torch {torch_version}",
        "# introspection; do not edit by hand.  The selection rules are documented in the generator.",
        "# Regenerate (MindSpore needs its own venv with numpy<2):",
        "#   /tmp/msvenv/bin/python tools/gen_api_table.py -o msprobe/data/ms_to_pt_api.yaml",
        f"# {len(table)} entries; keys: {count_by_prefix(table)}; values: {count_by_prefix(table.values())}.",
    ]
    lines += [f"{key}: {value}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", help="write the YAML here instead of stdout")
    args = parser.parse_args(argv)

    mindspore, torch = import_frameworks()
    versions = {"mindspore": base_version(mindspore.__version__), "torch": base_version(torch.__version__)}
    for package, version in versions.items():
        if version != EXPECTED_VERSIONS[package]:
            print(f"gen_api_table: warning: {package} {version} installed, table is pinned to "
                  f"{EXPECTED_VERSIONS[package]}", file=sys.stderr)
    text = render(build_table(mindspore, torch), versions["mindspore"], versions["torch"])
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
