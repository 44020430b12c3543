"""A Keras user's own `model.fit` script with one callback, as a `kind: command` job over SSH.

Real parts: two workers (chief on 127.0.0.2, worker on 127.0.0.3, separate run folders) under
MultiWorkerMirroredStrategy with tf_keras, examples/keras_fit.py unchanged, the console's own
monitor, Save now and Restore.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import checkpoints
from backend.runs import launcher, restore
from backend.watch.metrics import MetricsStore
from backend.runs.store import RunStore
from backend.config.spec import job_from_dict
from tests.conftest import processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]


def fit_job(*args: str):
    return job_from_dict({"kind": "command",
                          "command": [str(ROOT / "examples" / "keras_fit.py"), *args],
                          "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})


def metrics(run) -> list[dict]:
    chief = run.state.chief
    out = run.transport(chief.name).run(["cat", f"{chief.remote_run_dir}/metrics.jsonl"]).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def assert_tensorboard_holds_every_line(run, lines: list[dict], names: tuple[str, ...]) -> None:
    """The chief's TensorBoard event files, read with TensorFlow's own reader (the loopback hosts
    share this filesystem), hold each metrics line's values: ``loss`` and ``names`` per worker and
    global, validation values in the validation run (issue 46: every job kind writes them)."""
    from tests.app.test_cli_tensorboard import chief_dir, scalars
    folder = chief_dir(run.store.root, run.run_id) / "tensorboard"
    train, val = scalars(folder), scalars(folder / "validation")
    assert sorted(train) == sorted({m["step"] for m in lines}), (sorted(train), folder)
    for m in lines:
        point, task = train[m["step"]], m["task"]
        assert point[f"loss/{task}"] == pytest.approx(m["metrics"]["loss"], rel=1e-5)
        assert point["loss/global"] == pytest.approx(m["global"]["loss"], rel=1e-5)
        for name in (n for n in names if n in m["metrics"]):   # a line may carry fewer
            assert point[f"{name}/{task}"] == pytest.approx(m["metrics"][name], rel=1e-5), (name, m)
        validated = {k[4:]: v for k, v in (m.get("global") or {}).items() if k.startswith("val_")}
        for name, value in validated.items():
            assert val[m["step"]][f"{name}/global"] == pytest.approx(value, rel=1e-5), (name, m)


@pytest.mark.slow
def test_fit_job_shows_both_workers_saves_now_on_both_and_restores(ssh_cluster, ssh_options, tmp_path):
    run = launcher.launch(ssh_cluster, fit_job("--epochs", "2", "--steps", "60", "--pace", "0.05"),
                          store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        wait_for(lambda: sorted(store.tasks()) == ["chief-0", "worker-0"]
                 and min(len(store.series(t)) for t in store.tasks()) >= 2, 180,
                 "two metric points from each worker")
        chief, worker = (store.series(t).loss for t in ("chief-0", "worker-0"))
        assert chief[-1] != worker[-1]          # each worker's own loss, not one number twice
        saved = checkpoints.save_now(run, wait_s=120)
        assert saved % 10 == 0                  # at a sync point, which every worker joins
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run)]
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
        run.wait(timeout=300)
    finally:
        monitor.stop()
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished"
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert {60, 120, saved} <= set(listed)     # epoch ends and the Save now
    assert listed[60]["epoch"] == 1 and listed[120]["epoch"] == 2
    assert set(listed[120]["losses"]) == {"chief-0", "worker-0"}
    first = metrics(run)
    assert {m["task"] for m in first} == {"chief-0", "worker-0"}
    steps, global_loss = store.global_loss()
    assert float(global_loss[-1]) < float(global_loss[0])

    restore.restore(run, 60)
    run.wait(timeout=300)
    assert run.state.phase == "finished"
    resumed = [m for m in metrics(run) if m["attempt"] == run.state.attempt]
    assert resumed[0]["step"] == 61 and resumed[-1]["step"] == 120   # fit went on from step 60
    before = next(m for m in first if m["step"] == 70 and m["task"] == "chief-0")["metrics"]["loss"]
    again = next(m for m in resumed if m["step"] == 70 and m["task"] == "chief-0")["metrics"]["loss"]
    assert abs(again - before) < 0.2 * before   # restored weights, not a fresh model
    assert processes_of(run) == []


KERAS3_SCRIPT = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np, tfconsole
keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
x = np.random.RandomState(0).normal(size=(640, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model.fit(x, y, batch_size=32, epochs=2, callbacks=[tfconsole.KerasCallback(every=5)], verbose=0)
print("keras", keras.__version__, "replicas", strategy.num_replicas_in_sync)
"""


@pytest.mark.slow
def test_keras3_fit_under_mirrored_strategy_reports_and_checkpoints(tmp_path):
    """Keras 3 (its fit fails under MWMS, docs/facts.md #1): one worker, two replicas."""
    from tests.unit.test_client import _env, _python, _unpack
    run = tmp_path / "run"
    _unpack(run)
    env = {k: v for k, v in _env(run, 0).items() if k != "TF_CONFIG"}
    env.update(TFCONSOLE_TASK="worker-0", TF_CPP_MIN_LOG_LEVEL="2")
    out = _python(KERAS3_SCRIPT, env, tmp_path)
    assert "keras 3." in out and "replicas 2" in out
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    assert {m["task"] for m in lines} == {"worker-0"} and lines[-1]["metrics"]["loss"] < lines[0]["metrics"]["loss"]
    assert all(m["metrics"]["loss"] == m["global"]["loss"] for m in lines)
    from backend.client.harness.ckpt_index import list_complete
    listed = list_complete(str(run / "checkpoints"))
    assert [(c["step"], c["epoch"]) for c in listed] == [(20, 1), (40, 2)]
    assert listed[-1]["keras"].startswith("3.")


@pytest.mark.slow
def test_keras3_fit_resumed_goes_on_from_the_restored_epoch(tmp_path):
    """Keras 3 has no mid-epoch start: a resumed fit starts at the restored step's epoch
    (``initial_epoch``), so epochs do not start over; a mid-epoch step redoes that epoch's
    first batches, on fresh data."""
    from tests.unit.test_client import _env, _python, _unpack
    run = tmp_path / "run"
    _unpack(run)
    env = {k: v for k, v in _env(run, 0).items() if k != "TF_CONFIG"}
    env.update(TFCONSOLE_TASK="worker-0", TF_CPP_MIN_LOG_LEVEL="2")
    script = KERAS3_SCRIPT.replace("KerasCallback(every=5)", "KerasCallback(every=5, checkpoint_every=25)")
    script = script.replace("verbose=0)", "verbose=0)\nprint('epochs run', len(model.history.epoch))")
    _python(script, env, tmp_path)
    (run / "metrics.jsonl").unlink()
    # A shrink's scale (keep_replica_batch), applied after the restore brought back the saved rate.
    out = _python(script, {**env, "TFCONSOLE_ATTEMPT": "4", "TFCONSOLE_RESUME_STEP": "20",
                           "TFCONSOLE_LR_SCALE": "0.5"}, tmp_path)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m["step"] for m in lines]
    assert "epochs run 1" in out and (steps[0], steps[-1]) == (21, 40), (out, steps)
    assert "learning rate 0.05 x 0.5 = 0.025 (the run shrank)" in out
    assert all(m["global"]["learning_rate"] == pytest.approx(0.025) for m in lines), lines[0]
    (run / "metrics.jsonl").unlink()
    out = _python(script, {**env, "TFCONSOLE_ATTEMPT": "5", "TFCONSOLE_RESUME_STEP": "25"}, tmp_path)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert "epochs run 1" in out and (steps[0], steps[-1]) == (21, 40), (out, steps)
    assert "redoes steps 21-25" in out


@pytest.mark.slow
def test_at_fast_steps_the_default_callback_meets_its_workers_a_few_times_a_second(tmp_path):
    """Cost (issue 26: under 3 % at 5 ms steps): a gather costs ~3 ms, so at millisecond steps
    "every 10 steps" would spend a third of the time there. By default the workers meet at most
    every 10 steps and no more often than every ``min_sync_s`` (0.25 s): each sync carries the
    next sync step, the same on every worker."""
    from tests.unit.test_client import _env, _python, _unpack
    run = tmp_path / "run"
    _unpack(run)
    env = {k: v for k, v in _env(run, 0).items() if k != "TF_CONFIG"}
    env.update(TFCONSOLE_TASK="worker-0", TF_CPP_MIN_LOG_LEVEL="2")
    script = KERAS3_SCRIPT.replace("KerasCallback(every=5)", "KerasCallback()").replace(
        'tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])', "tf.distribute.get_strategy()").replace(
        "epochs=2,", "epochs=2, steps_per_epoch=300,").replace(
        "x = np.random.RandomState(0).normal(size=(640, 4))", "x = np.random.RandomState(0).normal(size=(19200, 4))")
    out = _python(script.replace("model.fit(", "import time; t0 = time.time()\nmodel.fit(") +
                  "\nprint('fit seconds', time.time() - t0)\n", env, tmp_path)
    seconds = float(out.split("fit seconds", 1)[1].split()[0])
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[0] == 1 and 300 in steps and 600 in steps      # first step, epoch ends
    assert len(steps) <= seconds / 0.25 + 4, (seconds, steps)    # 600 steps: 61 lines before
    # on multiples of 10, never closer than 10 steps but where an epoch end calls a sync of its own
    assert min(b - a for a, b in zip(steps, steps[1:]) if a != 1 and b not in (300, 600)) >= 10, steps


@pytest.mark.slow
def test_the_fit_script_still_runs_by_hand_and_writes_nothing(tmp_path):
    from tests.unit.test_client import _python, _unpack
    run = tmp_path / "run"
    _unpack(run)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TFCONSOLE_")}
    env.update(PYTHONPATH=str(run / "lib"), TF_CPP_MIN_LOG_LEVEL="2")
    before = sorted(p.name for p in run.iterdir())
    out = _python(KERAS3_SCRIPT, env, tmp_path)
    assert "replicas 2" in out
    assert sorted(p.name for p in run.iterdir()) == before and sorted(
        p.name for p in tmp_path.iterdir()) == ["run"]


CHECK_EXPORT = """
import os, sys, json
os.environ["TF_USE_LEGACY_KERAS"] = "1"
sys.path.insert(0, {examples!r})
import numpy as np, tensorflow as tf, tf_keras
from sklearn.datasets import load_digits
from keras_fit import build_model          # the script's own model, not export's rebuild
x = (load_digits(return_X_y=True)[0][:16] / 16.0).astype("float32")
model = build_model()
model(x)
tf.train.Checkpoint(model=model).restore({prefix!r}).expect_partial()
want = model(x).numpy()
keras_file = tf_keras.models.load_model({keras_file!r}, compile=False)(x).numpy()
loaded = tf.saved_model.load({saved_model!r})
served = loaded.serve(x).numpy()
print("DIFF", json.dumps([float(np.abs(keras_file - want).max()), float(np.abs(served - want).max())]))
"""


@pytest.mark.slow
def test_export_of_a_fit_job_checkpoint_verifies_and_reloads_as_the_checkpoint(
        ssh_cluster, ssh_options, tmp_path):
    """Export of a command (fit) job: the callback left the model's architecture next to the
    checkpoints; export rebuilds it with no strategy and verifies in a fresh process."""
    run = launcher.launch(ssh_cluster, fit_job("--epochs", "1", "--steps", "30"),
                          store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    try:
        run.wait(timeout=300)
    finally:
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished"
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert 30 in listed
    result = checkpoints.export(run, step=30, name="fit-30")
    assert result["match"] is True and result["step"] == 30
    assert result["max_abs_diff"] <= result["tolerance"]
    assert set(result["formats"]) == {"savedmodel", "keras"}
    # The files on the chief's host reload in a plain process, predicting as the checkpoint does.
    import subprocess
    import sys
    code = CHECK_EXPORT.format(examples=str(ROOT / "examples"), prefix=listed[30]["prefix"],
                               keras_file=result["paths"]["keras"],
                               saved_model=result["paths"]["savedmodel"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    diffs = json.loads(out.stdout.split("DIFF ", 1)[1])
    assert max(diffs) <= 1e-5, diffs


STAGED_FITS = """
import json, os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras, tfconsole
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
x = np.random.RandomState(0).normal(size=(4096, 4)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).repeat().batch(32)
for stage in range(4):   # a script that fits in stages, as many do
    model.fit(ds, epochs=1, steps_per_epoch=60, callbacks=[tfconsole.KerasCallback()], verbose=0)
print("stages done")
"""


@pytest.mark.slow
def test_a_script_that_fits_in_stages_counts_on_across_its_fits(local_cluster, python_path, tmp_path):
    """Four fit() calls of 60 steps in one script, a new callback each: one curve of steps 1-240
    and checkpoints at 60, 120, 180 and 240 (before: every fit started over at step 1, so the
    curve went back four times and ckpt-60 was written four times, the last over the first)."""
    script = tmp_path / "stages.py"
    script.write_text(STAGED_FITS)
    job = job_from_dict({"kind": "command", "command": [python_path, str(script)],
                         "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})
    run = launcher.launch(local_cluster, job, store=RunStore(tmp_path / "runs"),
                          preflight=launcher.Preflight.SKIP)
    run.wait(timeout=300)
    assert run.state.phase == "finished"
    assert "stages done" in run.log_tail("worker-0")
    steps = [m["step"] for m in metrics(run) if m["task"] == "worker-0"]
    assert steps == sorted(set(steps)) and steps[0] == 1 and steps[-1] == 240, steps
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert {60, 120, 180, 240} <= set(listed), sorted(listed)
    assert [listed[s]["epoch"] for s in (60, 120, 180, 240)] == [1, 2, 3, 4]
