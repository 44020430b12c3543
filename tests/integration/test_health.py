"""Health watch, for real: a two-worker TensorFlow run whose loss turns NaN is flagged by the
console's monitor and by ``status`` with each worker's TensorFlow and Keras versions, and with
``stop_on_nan`` every worker stops with a clear error and nothing is left running."""
from __future__ import annotations

import subprocess
import sys

import keras
import pytest
import tensorflow as tf

from backend.runs import launcher
from backend.watch.metrics import MetricsStore
from backend.config.spec import job_from_dict
from tests.conftest import autograph_files, processes_of, temp_left, wait_for
from tests.faults.conftest import TF_ENV, store  # noqa: F401
from tests.integration.test_hang import TINY_MODEL

# Labels turn NaN from global batch 200 on: the loss is finite, then NaN on every worker. With
# 20 ms asleep per step that is 4 s or more after step 1, so the workers are still running when
# launch's start check (3 s) looks; a run that ends before it is refused by launch instead.
NAN_JOB = '''
import keras
import tensorflow as tf

PARAMS = {}


def make_dataset(input_context, batch_size, seed):
    def batch(i):
        x = tf.random.stateless_normal([batch_size, 4], seed=tf.stack([tf.cast(seed, tf.int64), i]))
        y = tf.reduce_sum(x, axis=1, keepdims=True)
        return x, tf.where(i >= 200, tf.fill(tf.shape(y), float("nan")), y)
    return tf.data.Dataset.range(2 ** 62).map(batch)
''' + "\n\n" + TINY_MODEL


def test_the_store_keeps_each_tasks_first_non_finite_loss():
    store = MetricsStore()
    store.add_many([{"task": "worker-0", "step": s, "time": float(s), "loss": v, "global_loss": 1.0}
                    for s, v in ((5, 1.0), (10, float("nan")), (15, float("inf")))]
                   + [{"task": "worker-1", "step": 5, "time": 5.0, "loss": 0.5, "global_loss": 1.0}])
    assert set(store.nonfinite) == {"worker-0"}
    step, value = store.nonfinite["worker-0"]
    assert step == 10 and value != value   # NaN


@pytest.mark.slow
def test_nan_loss_is_flagged_with_versions_and_stops_the_run(local_cluster, store, tmp_path):
    module = tmp_path / "nan_job.py"
    module.write_text(NAN_JOB)
    job = job_from_dict({"kind": "harness", "module": str(module), "env": TF_ENV,
                         "params": {"epochs": 1, "steps_per_epoch": 400, "log_every": 5,
                                    "checkpoint_every": 0, "global_batch_size": 16,
                                    "stop_on_nan": True, "pace_s": 0.02}})
    before = autograph_files()
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    metrics = MetricsStore()
    monitor = run.monitor(metrics).start()
    try:
        wait_for(lambda: metrics.nonfinite, 240, "the monitor to flag the NaN loss")
        assert set(metrics.nonfinite) == {"worker-0", "worker-1"}
        assert all(step >= 200 for step, _ in metrics.nonfinite.values())
        assert len(metrics.series("worker-0")) >= 4   # finite points came first
    finally:
        monitor.stop()
    wait_for(lambda: (run.settle(), not run.state.live)[1], 120, "the run to end")
    assert run.state.phase == "failed"
    for task in ("worker-0", "worker-1"):
        log = run.log_tail(task)
        assert "HARNESS FAILED: NonFiniteLoss: loss is not finite at step" in log, log[-2000:]
        assert "stop_on_nan is set" in log
    cli = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run.run_id],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "Loss is not finite: worker-0 nan at step" in cli.stdout, cli.stdout
    for task in ("worker-0", "worker-1"):
        assert f"{task}: TensorFlow {tf.__version__}, Keras {keras.__version__}" in cli.stdout
    wait_for(lambda: processes_of(run) == [], 30, "no process of the run")
    assert temp_left(run, before) == []   # issue 47: a failed run left TensorFlow's temp files


@pytest.mark.slow
def test_a_nan_loss_is_alerted_while_a_run_without_restarts_trains_on(local_cluster, store, tmp_path):
    """No restart policy, no stop_on_nan, no console open: the webhook still hears of the NaN
    loss once, while the run trains on (the run's keeper reads it; before, only a kept run had
    one)."""
    from tests.webhook import Receiver
    module = tmp_path / "nan_job.py"
    module.write_text(NAN_JOB)
    receiver = Receiver((200,), 0.0)
    try:
        job = job_from_dict({"kind": "harness", "module": str(module), "env": TF_ENV,
                             "alerts": {"webhook": receiver.url, "format": "json"},
                             "params": {"epochs": 1, "steps_per_epoch": 1500, "log_every": 5,
                                        "checkpoint_every": 0, "global_batch_size": 16, "pace_s": 0.02}})
        run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
        try:
            bodies = receiver.wait(1, timeout=240)
            assert [b["event"] for b in bodies] == ["nan"], bodies
            assert bodies[0]["step"] >= 200
            assert store.load(run.run_id).phase == "running"   # told while it trains on
        finally:
            run.stop()
    finally:
        receiver.close()
    wait_for(lambda: processes_of(run) == [], 30, "no process of the run")


NAN_FIT = """
import os, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras, tfconsole
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
x = np.random.RandomState(0).normal(size=(12800, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
y[6400:] = np.nan                                  # from global batch 200 on: finite, then NaN
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.02))
model.fit(ds, epochs=1, steps_per_epoch=400, verbose=0,
          callbacks=[tfconsole.KerasCallback(every=5, stop_on_nan=True), slow])
"""


@pytest.mark.slow
def test_a_fit_scripts_nan_loss_is_flagged_with_versions_and_stops_every_worker(
        local_cluster, store, python_path, tmp_path):
    """The harness's NaN watch for a `fit` script too (issue 46): health.json with each worker's
    TensorFlow and Keras (tf_keras here), `status` says it, and `stop_on_nan=True` stops both
    workers at the same step with the harness's words."""
    import tf_keras
    script = tmp_path / "nan_fit.py"
    script.write_text(NAN_FIT)
    job = job_from_dict({"kind": "command", "command": [python_path, str(script)],
                         "env": {**TF_ENV, "TF_USE_LEGACY_KERAS": "1"}})
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: (run.settle(), not run.state.live)[1], 240, "the run to end")
    assert run.state.phase == "failed"
    steps = set()
    for task in ("worker-0", "worker-1"):
        log = run.log_tail(task)
        assert "NonFiniteLoss: loss is not finite at step" in log and "stop_on_nan is set" in log, log[-2000:]
        steps.add(log.split("loss is not finite at step ", 1)[1].split()[0])
    assert len(steps) == 1 and int(steps.pop()) >= 200
    cli = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run.run_id],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "Loss is not finite: worker-0 nan at step" in cli.stdout, cli.stdout
    for task in ("worker-0", "worker-1"):
        assert f"{task}: TensorFlow {tf.__version__}, Keras {tf_keras.__version__}" in cli.stdout, cli.stdout
    wait_for(lambda: processes_of(run) == [], 30, "no process of the run")
