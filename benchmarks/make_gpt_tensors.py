#!/usr/bin/env python3
"""Real tensor dumps of a GPT for `msprobe compare` in tensor mode (issue 41): one training step of the TinyGPT of
tests/fixtures/pytorch_model (d_model 384, 6 heads, seq 128, batch 8, vocabulary 512, 6 layers by default),
dumped by our PyTorch collector at level L1, task tensor, forward and backward (the debugger stops before the
AdamW step): the target under bfloat16 CPU autocast, the golden in float32, same seed, weights and batch.

    python benchmarks/make_gpt_tensors.py OUT [--layers 6] [--batch 8] [--npy]

OUT/pt/{target,golden}/{dump.json,stack.json,construct.json,dump_tensor_data/*.pt} (the collector's rank folder,
moved; dump_data_dir rewritten to the new place). With --npy also OUT/npy/{target,golden}: the same tensors in
the MindSpore collector's layout (docs/dump.md, "Collecting dumps with MindSpore"): framework "mindspore", records
of type mindspore.Tensor with MindSpore's dtype names (Float32, BFloat16, Int64, Bool), no requires_grad, one
`<item>.npy` per tensor (bfloat16 widened to float32 exactly, as that collector saves it), statistics written by
the collectors' shared routine (msprobe.collect.stats; the bfloat16 ones kept from the PyTorch dump, which
computed them the same way). The entry names stay the PyTorch collector's (a MindSpore run would call its APIs
Mint./Primitive.); the compare reads them the same way. OUT/meta.json holds the bytes, files and entries.

Each side is trained in a child process (the system Python with this checkout first on PYTHONPATH); with the
defaults the pair takes about 1.9 GB as .pt and 2.2 GB as .npy, and 30-60 s to make.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "pytorch_model")
VERSION = 1   # bump when the output changes (bench_tensor.py regenerates older datasets)

CHILD = r'''
import json, os, sys
sys.path.insert(0, {model_dir!r})
import torch
from tiny_gpt import TinyGPT
from msprobe.pytorch import PrecisionDebugger, seed_all

args = json.loads(sys.argv[1])
torch.set_num_threads(1)
seed_all(1234)
model = TinyGPT(vocab=args["vocab"], d_model=args["d_model"], n_head=args["n_head"], n_layer=args["layers"],
                max_seq=args["seq"])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
generator = torch.Generator().manual_seed(42)
idx = torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=generator)
targets = torch.randint(0, args["vocab"], (args["batch"], args["seq"]), generator=generator)
config = {{"task": "tensor", "dump_path": args["dump_path"], "rank": [], "step": [], "level": "L1",
          "tensor": {{"scope": [], "list": [], "data_mode": ["all"]}}}}
config_path = os.path.join(os.path.dirname(args["dump_path"]), "config.json")
with open(config_path, "w") as handle:
    json.dump(config, handle)
debugger = PrecisionDebugger(config_path=config_path)
debugger.start(model=model)
with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args["bf16"]):
    _, loss = model(idx, targets)
loss.backward()
debugger.stop()
optimizer.step()
optimizer.zero_grad()
debugger.step()
print("LOSS", loss.item())
'''

MS_DTYPES = {"torch.float32": "Float32", "torch.bfloat16": "BFloat16", "torch.float16": "Float16",
             "torch.float64": "Float64", "torch.int64": "Int64", "torch.int32": "Int32", "torch.int16": "Int16",
             "torch.int8": "Int8", "torch.uint8": "UInt8", "torch.bool": "Bool"}


def train_side(out: str, bf16: bool, params: dict) -> None:
    """Dump one side into `out` (dump.json, stack.json, construct.json, dump_tensor_data/)."""
    work = out + ".work"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    script = os.path.join(work, "child.py")
    with open(script, "w") as handle:
        handle.write(CHILD.format(model_dir=MODEL_DIR))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = dict(params, bf16=bf16, dump_path=os.path.join(work, "dump"))
    subprocess.run([sys.executable, script, json.dumps(run)], check=True, env=env, cwd=work,
                   stdout=subprocess.DEVNULL)
    step = os.path.join(work, "dump", "step0")
    (rank,) = os.listdir(step)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(os.path.join(step, rank), out)
    shutil.rmtree(work)
    path = os.path.join(out, "dump.json")
    with open(path) as handle:
        dump = json.load(handle)
    dump["dump_data_dir"] = os.path.join(out, "dump_tensor_data")
    with open(path, "w") as handle:
        json.dump(dump, handle, indent=1)


def _ms_record(record: dict, source_dir: str, target_dir: str):
    """The MindSpore collector's record of a PyTorch record (saving its tensor as .npy), recursively."""
    import numpy as np
    import torch

    from msprobe.collect.stats import written_statistics

    if isinstance(record, list):
        return [_ms_record(item, source_dir, target_dir) for item in record]
    if not isinstance(record, dict):
        return record
    if record.get("type") != "torch.Tensor":
        if "type" in record:
            return dict(record)
        return {key: _ms_record(value, source_dir, target_dir) for key, value in record.items()}
    out = {"type": "mindspore.Tensor", "dtype": MS_DTYPES[record["dtype"]], "shape": record["shape"]}
    data_name = record.get("data_name")
    array = None
    if data_name:
        tensor = torch.load(os.path.join(source_dir, data_name), map_location="cpu", weights_only=True)
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        array = tensor.numpy()
    if array is None or record["dtype"] == "torch.bfloat16":
        out.update({key: record.get(key) for key in ("Max", "Min", "Mean", "Norm")})
    else:
        out.update(written_statistics(array))
    if array is not None:
        name = data_name[:-len(".pt")] + ".npy"
        with open(os.path.join(target_dir, name), "wb") as handle:
            np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
        out["data_name"] = name
    return out


def to_mindspore(source: str, target: str) -> None:
    """Write the MindSpore layout of the PyTorch side `source` into `target`."""
    shutil.rmtree(target, ignore_errors=True)
    tensor_dir = os.path.join(target, "dump_tensor_data")
    os.makedirs(tensor_dir)
    with open(os.path.join(source, "dump.json")) as handle:
        dump = json.load(handle)
    source_dir = os.path.join(source, "dump_tensor_data")
    data = {name: _ms_record(body, source_dir, tensor_dir) for name, body in dump["data"].items()}
    out = {"task": "tensor", "level": dump["level"], "framework": "mindspore", "dump_data_dir": tensor_dir,
           "data": data}
    with open(os.path.join(target, "dump.json"), "w") as handle:
        json.dump(out, handle, indent=1)
    for name in ("stack.json", "construct.json"):
        if os.path.exists(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))


def side_bytes(side: str) -> tuple[int, int]:
    """Bytes and count of the tensor files of one side."""
    with os.scandir(os.path.join(side, "dump_tensor_data")) as entries:
        sizes = [entry.stat().st_size for entry in entries if entry.is_file()]
    return sum(sizes), len(sizes)


def generate(out: str, layers: int = 6, batch: int = 8, npy: bool = False, d_model: int = 384, n_head: int = 6,
             seq: int = 128, vocab: int = 512) -> dict:
    """Make the dataset in out (built in out.tmp, renamed when complete); returns its meta.json."""
    params = {"layers": layers, "batch": batch, "d_model": d_model, "n_head": n_head, "seq": seq, "vocab": vocab}
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    meta = {"version": VERSION, "params": params, "formats": {}}
    for role, bf16 in (("target", True), ("golden", False)):
        train_side(os.path.join(tmp, "pt", role), bf16, params)
    formats = ["pt"]
    if npy:
        for role in ("target", "golden"):
            to_mindspore(os.path.join(tmp, "pt", role), os.path.join(tmp, "npy", role))
        formats.append("npy")
    for fmt in formats:
        sides = [side_bytes(os.path.join(tmp, fmt, role)) for role in ("target", "golden")]
        with open(os.path.join(tmp, fmt, "target", "dump.json")) as handle:
            entries = len(json.load(handle)["data"])
        meta["formats"][fmt] = {"bytes": sum(s[0] for s in sides), "files": sum(s[1] for s in sides),
                                "entries": entries}
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    for fmt in formats:         # the sides moved with the folder: point dump_data_dir at the final place
        for role in ("target", "golden"):
            path = os.path.join(out, fmt, role, "dump.json")
            with open(path) as handle:
                dump = json.load(handle)
            dump["dump_data_dir"] = os.path.join(out, fmt, role, "dump_tensor_data")
            with open(path, "w") as handle:
                json.dump(dump, handle, indent=1)
    with open(os.path.join(out, "meta.json"), "w") as handle:
        json.dump(meta, handle, indent=1)
    return meta


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--npy", action="store_true", help="also the MindSpore .npy layout of the same tensors")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    meta = generate(os.path.abspath(args.out), args.layers, args.batch, args.npy)
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
