"""format tensorboard: event files TensorBoard reads back (its own reader), with and without google-crc32c."""

from __future__ import annotations

import glob
import math
import os

import pytest

pytest.importorskip("tensorboard")

from msprobe.monitor import tensorboard as tb  # noqa: E402
from msprobe.monitor.records import Anomaly  # noqa: E402
from tests.monitor.records_factory import records, row  # noqa: E402


def read_back(directory) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for run in sorted(os.listdir(directory)):
        accumulator = EventAccumulator(os.path.join(directory, run))
        accumulator.Reload()
        out[run] = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    return out


def steps(count: int):
    for step in range(count):
        yield records(step, [row("actv", "fc1.output", norm=2.0 + step, mean=0.5, micro_step=0),
                             row("actv_grad", "fc1.input", present=False),
                             row("grad_unreduced", "fc1.weight", norm=0.25 * (step + 1), nans=1.0 if step == 2 else 0.0)],
                      ops=("max", "mean", "norm", "nans"))


@pytest.mark.parametrize("fast_crc", [True, False])
def test_tensorboard_reads_what_is_written(tmp_path, monkeypatch, fast_crc):
    if not fast_crc:        # the tensorboard package's own CRC-32C (pure Python) when google-crc32c is missing
        import builtins

        real_import = builtins.__import__

        def no_google(name, *args, **kwargs):
            if name == "google_crc32c":
                raise ImportError(name)
            return real_import(name, *args, **kwargs)
        monkeypatch.setattr(builtins, "__import__", no_google)
    elif pytest.importorskip("google_crc32c") is None:
        return
    writer = tb.TensorBoardWriter(str(tmp_path))
    for rec in steps(4):
        writer.write(rec)
    writer.write_anomalies([Anomaly(kind="spike", rank=0, step=3, micro_step=0, stage="forward", call=0,
                                    module="fc1", name="fc1.output", group="actv", op="norm", value=5.0,
                                    baseline=2.0, rule="AnomalyTurbulence")])
    writer.close()
    runs = read_back(tmp_path)
    assert set(runs) == {"actv", "grad_unreduced", "anomalies"}          # an absent slot writes nothing
    assert runs["actv"]["vp0:fc1.output:micro0/norm"] == [(s, 2.0 + s) for s in range(4)]
    assert runs["actv"]["vp0:fc1.output:micro0/mean"] == [(s, 0.5) for s in range(4)]
    grads = runs["grad_unreduced"]["vp0:fc1.weight/norm"]
    assert [s for s, _ in grads] == [0, 1, 2, 3] and all(math.isclose(v, 0.25 * (s + 1)) for s, v in grads)
    assert runs["grad_unreduced"]["vp0:fc1.weight/nans"][2] == (2, 1.0)
    assert runs["anomalies"] == {"spike/actv/fc1.output/norm": [(3, 5.0)]}


def test_the_engine_writes_events_beside_the_csvs(tmp_path):
    from msprobe.monitor.layout import RunWriter

    run = RunWriter(str(tmp_path), 0, ("max", "mean", "norm", "nans"))
    writer = tb.TensorBoardWriter(run, config=None)
    for rec in steps(2):
        run.write(rec)
        writer.write(rec)
    writer.close()
    run.close()
    folder = run.directory
    assert glob.glob(os.path.join(folder, "actv", "events.out.tfevents.*"))
    assert glob.glob(os.path.join(folder, "actv_*.csv"))
    assert read_back(folder)["actv"]["vp0:fc1.output:micro0/norm"] == [(0, 2.0), (1, 3.0)]
