"""msprobe triage's parts that need no training run: the category of cause from hand-made dump records, the first
NaN-producing op, the sitecustomize's chaining, the command's usage errors, the next-dump compare command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from msprobe.compare.next_dump import compare_command, side_configs
from msprobe.triage import classify as cl
from msprobe.triage import evidence
from msprobe.triage.launch import SITE_DIR

from conftest import run_cli


def tensor(dtype="torch.float32", shape=(4, 8), top=1.0):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(shape), "Max": top, "Min": -top, "Mean": 0.0,
            "Norm": 2.0}


def record(*args, out_dtype="torch.float32", **kwargs):
    return {"input_args": list(args), "input_kwargs": kwargs, "output": [tensor(out_dtype)]}


def cause(target, golden, same=False, frameworks=("pytorch", "pytorch"), replayed=None, inputs_differ=False):
    return cl.classify(same, target, golden, frameworks, replayed, inputs_differ)


def test_the_category_follows_the_evidence():
    x, w, b = tensor(), tensor(shape=(8, 8)), tensor(shape=(8,))
    golden = record(x, w, b)
    # a linear run in float16
    half = record(tensor("torch.float16"), tensor("torch.float16", (8, 8)), tensor("torch.float16", (8,)),
                  out_dtype="torch.float16")
    assert cause(half, golden).category == cl.DTYPE
    assert "float16" in cause(half, golden).reason and "float32" in cause(half, golden).reason
    # its bias dropped: an argument, not a dtype (one tensor fewer)
    assert cause(record(x, w), golden).category == cl.ARGUMENT
    assert cause(record(x, w, None), golden).category == cl.ARGUMENT
    # another eps / axis
    eps = record(x, [{"type": "int", "value": 8}], w, b, {"type": "float", "value": 0.01})
    eps_golden = record(x, [{"type": "int", "value": 8}], w, b, {"type": "float", "value": 1e-05})
    found = cause(eps, eps_golden)
    assert found.category == cl.ARGUMENT and "0.01" in found.reason and "1e-05" in found.reason
    axis = cause(record(x, dim={"type": "int", "value": -2}), record(x, dim={"type": "int", "value": -1}))
    assert axis.category == cl.ARGUMENT and "kwargs.dim" in axis.reason
    # the golden never calls it; the same command twice; NaN
    assert cause(golden, None).category == cl.ARGUMENT
    # ... and it is a cast the golden does not make (a Tensor.to(float16) of a float32 tensor): dtype/cast
    cast = cause(record(x, {"type": "mindspore.dtype", "value": "Float16"}, out_dtype="Float16"), None)
    assert cast.category == cl.DTYPE and "a cast to float16" in cast.reason
    assert cause(golden, golden, same=True).category == cl.NONDETERMINISM
    assert cl.classify(False, golden, golden, ("pytorch", "pytorch"), None, False, non_finite=True).category == \
        cl.NON_FINITE
    # a MindSpore Primitive (its attributes, such as LayerNorm's epsilon, are not recorded) with identical inputs
    prim = cl.classify(False, golden, golden, ("mindspore", "mindspore"), None, False,
                       culprit="Primitive.layer_norm.LayerNorm.0.forward")
    assert prim.category == cl.ARGUMENT and "attributes" in prim.reason
    # same everything: the kernel; the replay's failure is named in the reason
    assert cause(golden, golden).category == cl.KERNEL
    assert "benchmark" in cause(golden, golden, replayed={"status": "error"}).reason
    # two frameworks, same dtypes: a convention; other dtypes: a dtype difference
    ms = record({"type": "mindspore.Tensor", "dtype": "Float32", "shape": [4, 8], "Max": 1.0})
    assert cause(ms, record(x), frameworks=("mindspore", "pytorch")).category == cl.CONVENTION
    ms16 = record({"type": "mindspore.Tensor", "dtype": "Float16", "shape": [4, 8], "Max": 1.0},
                  out_dtype="Float16")
    assert cause(ms16, record(x), frameworks=("mindspore", "pytorch")).category == cl.DTYPE
    assert all(cl.ADVICE[c] for c in (cl.DTYPE, cl.ARGUMENT, cl.KERNEL, cl.NONDETERMINISM, cl.CONVENTION))


def test_first_non_finite_op_is_the_one_fed_finite_inputs():
    nan = float("nan")
    data = {"Functional.linear.0.forward": record(tensor()),
            "Torch.log.0.forward": {"input_args": [tensor()], "output": [dict(tensor(), Max=nan, Min=nan)]},
            "Functional.relu.0.forward": {"input_args": [dict(tensor(), Max=nan)], "output": [dict(tensor(), Max=nan)]},
            "Torch.log.0.backward": {"input": [tensor()], "output": [dict(tensor(), Max=nan)]}}
    assert evidence.first_non_finite({"data": data}) == "Torch.log.0.forward"
    assert evidence.first_non_finite({"data": {"Functional.linear.0.forward": record(tensor())}}) is None
    # the reader's sentinel strings and the dump's Infinity spelled as text count too
    sentinel = {"input_args": [tensor()], "output": [dict(tensor(), Max="\x00msprobe:inf")]}
    assert evidence.first_non_finite({"data": {"Torch.exp.0.forward": sentinel}}) == "Torch.exp.0.forward"


def test_user_line_skips_framework_frames():
    stack = ["File /venv/lib/python3.11/site-packages/torch/nn/functional.py, line 2, in f, \n return x",
             "File /work/msprobe/triage/inject.py, line 9, in call, \n y",
             "File /tmp/job/train.py, line 40, in forward, \n x = F.layer_norm(x, eps)"]
    assert evidence.user_line(stack) == "File /tmp/job/train.py, line 40, in forward, x = F.layer_norm(x, eps)"
    assert evidence.user_line([]) == ""


def _python(code: str, env: dict, cwd) -> str:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_sitecustomize_chains_to_the_one_it_hides_and_is_off_without_a_plan(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SITE_DIR, str(theirs), os.environ.get("PYTHONPATH", "")]))
    env.pop("MSPROBE_TRIAGE_PLAN", None)
    code = "import os, sys; print(os.environ.get('THEIRS_RAN'), 'msprobe' in sys.modules)"
    assert _python(code, env, tmp_path).split() == ["1", "False"]
    # armed: the user's sitecustomize still runs, the hook waits for torch/mindspore (neither imported here)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"config": str(tmp_path / "c.json"), "step": 0, "framework": "pytorch"}))
    env["MSPROBE_TRIAGE_PLAN"] = str(plan)
    code = ("import os, sys; print(os.environ.get('THEIRS_RAN'), 'msprobe.triage.inject' in sys.modules, "
            "'torch' in sys.modules)")
    assert _python(code, env, tmp_path).split() == ["1", "True", "False"]
    # a broken plan: one line on stderr, the program runs
    plan.write_text("{")
    done = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "ran" and "msprobe triage: the collector could not be installed" in done.stderr


@pytest.mark.parametrize("args, message", [
    ([], "give --target CMD"),
    (["--golden", "python x.py"], "give --target CMD"),
    (["-tp", "a"], "-tp and -gp go together"),
    (["--target", "  "], "--target must be a non-empty command"),
    (["--target", "python x.py", "--step", "-1"], "invalid step"),
    (["--target", "python x.py", "--timeout", "0"], "invalid timeout"),
])
def test_usage_errors_are_one_line_and_exit_2(args, message, tmp_path, capsys):
    try:
        code = run_cli(["triage", *args, "-o", tmp_path / "out"])
    except SystemExit as exc:          # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_next_dump_commands_keep_each_run_apart(tmp_path):
    info = {"sides": [{"api": "Mint.matmul.0.forward", "module": "Cell.attn.Attention.forward.0"},
                      {"api": "Torch.matmul.0.forward", "module": "Module.attn.Attention.forward.0"}],
            "level": "mix", "step": [3], "rank": [1]}
    configs = side_configs(info, str(tmp_path / "nd"))
    assert configs["target"]["dump_path"] == str(tmp_path / "nd" / "target")
    assert configs["golden"]["dump_path"] == str(tmp_path / "nd" / "golden")
    assert configs["target"]["tensor"]["list"][0].startswith("Mint.")
    assert all(not name.startswith(("Mint.", "Cell.")) for name in configs["golden"]["tensor"]["list"])
    assert (configs["target"]["step"], configs["golden"]["rank"]) == ([3], [1])
    command = compare_command(info, str(tmp_path / "nd"), str(tmp_path / "cmp"))
    assert command == (f"msprobe compare -tp {tmp_path / 'nd' / 'target' / 'step3'} -gp "
                       f"{tmp_path / 'nd' / 'golden' / 'step3'} -o {tmp_path / 'cmp'}")     # a plain compare


def test_the_documented_commands_parse():
    """docs/triage.md's and -h's `msprobe triage` commands use options the command has."""
    import re
    import shlex
    from pathlib import Path

    from msprobe.cli import triage as command
    from msprobe.cli.main import build_parser

    docs = (Path(__file__).parents[2] / "docs" / "triage.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", docs, re.S) + [command.EPILOG]
    lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()
             if line.strip().startswith("msprobe triage")]
    assert len(lines) >= 5
    parser = build_parser()
    for line in lines:
        args = parser.parse_args(shlex.split(line)[1:])
        assert args.command == "triage" and (args.target or args.target_path)


def test_da_prints_one_config_per_run_and_the_compare_that_follows(tmp_path, caplog):
    """Issue 34: -da's advice sent both runs into ./next_dump, where rank folders of the second run overwrite the
    first's; now each run has its file and folder, and the exact compare is printed."""
    import logging

    from conftest import fixture_pair

    target, golden = fixture_pair("stats_mix_step0")
    with caplog.at_level(logging.INFO, logger="msprobe"):
        assert run_cli(["compare", "-tp", target, "-gp", golden, "-o", tmp_path, "-da"]) == 0
    advice = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("Next step"))
    (target_file,) = tmp_path.glob("next_dump_*_target.json")
    (golden_file,) = tmp_path.glob("next_dump_*_golden.json")
    root = tmp_path.resolve() / "next_dump"
    assert f"target run: PrecisionDebugger(config_path='{target_file}')" in advice
    assert f"golden run: PrecisionDebugger(config_path='{golden_file}')" in advice
    assert f"then:       msprobe compare -tp {root / 'target'} -gp {root / 'golden'} -o " in advice
    assert "into ./next_dump" not in advice
    folders = {json.loads(path.read_text())["dump_path"] for path in (target_file, golden_file)}
    assert folders == {str(root / "target"), str(root / "golden")}


def test_a_mindspore_dump_against_a_pytorch_one_is_compared_with_the_layer_mapping(tmp_path):
    """-tp/-gp of two frameworks (round 1 only): the twin pair names nothing; with one matmul's output made wrong
    the culprit is that matmul, named in the target's framework, and the by-hand compare carries -lm."""
    import shutil

    import msprobe

    from conftest import FIXTURES

    for side in ("ms_mix", "pt_mix"):
        shutil.copytree(FIXTURES / "cross" / side, tmp_path / side)
    target, golden = tmp_path / "ms_mix" / "dump.json", tmp_path / "pt_mix" / "dump.json"
    twin = msprobe.triage(target_dump=str(target), golden_dump=str(golden), output_dir=str(tmp_path / "twin"))
    assert twin.culprit is None and twin.exit_code == 0
    data = json.loads(target.read_text())
    data["data"]["Mint.matmul.0.forward"]["output"][0]["Max"] *= 3
    target.write_text(json.dumps(data))
    found = msprobe.triage(target_dump=str(target), golden_dump=str(golden), output_dir=str(tmp_path / "bad"))
    assert found.culprit == "Mint.matmul.0.forward" and found.module.startswith("Cell.layers.0.attn.")
    assert found.rounds[0]["commands"][-1].endswith("-da -lm")
    assert found.rounds[1]["evidence"][0].startswith("skipped: no training commands")


def test_the_forced_config_replaces_a_debuggers_own_arguments(tmp_path, monkeypatch):
    """MSPROBE_DUMP_CONFIG (set by the triage for its runs): a script's own PrecisionDebugger arguments give way."""
    from msprobe.collect.config import FORCED_CONFIG, load_config

    forced = tmp_path / "forced.json"
    forced.write_text(json.dumps({"task": "statistics", "level": "mix", "step": [2], "dump_path": str(tmp_path / "d")}))
    monkeypatch.setenv(FORCED_CONFIG, str(forced))
    config = load_config(str(tmp_path / "missing.json"), task="tensor", level="L1", dump_path=str(tmp_path / "own"))
    assert (config.task, config.level, list(config.step), config.dump_path) == ("statistics", "mix", [2],
                                                                                str(tmp_path / "d"))
    assert not (tmp_path / "own").exists()
    monkeypatch.delenv(FORCED_CONFIG)
    assert load_config(None, task="tensor", dump_path=str(tmp_path / "own")).task == "tensor"
