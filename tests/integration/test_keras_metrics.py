"""Every metric a Keras script compiles, validation and the learning rate, from one callback.

Real parts: a tf_keras `model.fit` with `metrics=["accuracy"]`, `validation_data` and a
learning-rate schedule under MultiWorkerMirroredStrategy on two workers over SSH (chief on
127.0.0.2, worker on 127.0.0.3), launched as a `kind: command` job. The values on the chief's
metrics lines and in the checkpoints are checked against independent computations: numpy on
the weights the script itself recorded at each epoch end (no strategy, no Keras), Keras' own
epoch-end History, and the schedule's formula.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from backend import checkpoints
from backend.config.spec import job_from_dict
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.integration.test_keras_fit import assert_tensorboard_holds_every_line, metrics

STEPS, EPOCHS, BATCH, VAL_N = 8, 3, 32, 128

SCRIPT = f"""
import json, os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras, tfconsole
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.RandomState(0)
w = rng.normal(size=(8,))
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ w > 0).astype("float32")[:, None]
xv = rng.normal(size=({VAL_N}, 8)).astype("float32")
yv = (xv @ w <= 0).astype("float32")[:, None]   # flipped labels: val_loss rises as it learns
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
    rate = keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps={STEPS}, decay_rate=0.5)
    model.compile(optimizer=keras.optimizers.SGD(rate), loss="binary_crossentropy",
                  metrics=["accuracy"])
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch({BATCH})
val = tf.data.Dataset.from_tensor_slices((xv, yv)).batch(32)
run_dir = tfconsole.context().run_dir

class Record(keras.callbacks.Callback):   # the test's own record: the weights at each epoch end
    def on_epoch_end(self, epoch, logs=None):
        if tfconsole.context().is_chief:
            with open(os.path.join(run_dir, f"weights-{{epoch + 1}}.json"), "w") as fh:
                json.dump([v.tolist() for v in self.model.get_weights()], fh)

cb = tfconsole.KerasCallback(every={STEPS}, keep_checkpoints=1, keep_best=1,
                             best_metric="val_loss", best_mode="min")
history = model.fit(ds, epochs={EPOCHS}, steps_per_epoch={STEPS}, validation_data=val,
                    callbacks=[cb, Record()], verbose=0)
if tfconsole.context().is_chief:
    with open(os.path.join(run_dir, "history.json"), "w") as fh:
        json.dump(history.history, fh)
    with open(os.path.join(run_dir, "val.json"), "w") as fh:
        json.dump([xv.tolist(), yv.tolist()], fh)
print("fit done", flush=True)
"""


def read_json(run, name: str):
    chief = run.state.chief
    return json.loads(run.transport(chief.name).run(
        ["cat", f"{chief.remote_run_dir}/{name}"]).stdout)


def truth(weights, xv, yv) -> tuple[float, float]:
    """val_loss and val_accuracy of a one-layer sigmoid model, in numpy."""
    kernel, bias = np.asarray(weights[0]), np.asarray(weights[1])
    p = 1 / (1 + np.exp(-(xv @ kernel + bias)))
    loss = -np.mean(yv * np.log(p) + (1 - yv) * np.log(1 - p))
    return float(loss), float(np.mean((p > 0.5) == (yv > 0.5)))


@pytest.mark.slow
def test_fit_shows_accuracy_per_worker_validation_and_learning_rate_and_keeps_the_best(
        ssh_cluster, ssh_options, python_path, tmp_path):
    script = tmp_path / "fit_metrics.py"
    script.write_text(SCRIPT)
    job = job_from_dict({"kind": "command", "command": [python_path, str(script)],
                         "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    try:
        run.wait(timeout=300)
    finally:
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    lines = metrics(run)
    history = read_json(run, "history.json")
    xv, yv = (np.asarray(a) for a in read_json(run, "val.json"))
    by_step: dict = {}
    for m in lines:
        by_step.setdefault(m["step"], {})[m["task"]] = m
    ends = [STEPS * e for e in range(1, EPOCHS + 1)]
    assert sorted(by_step) == [1, *ends] and all(len(v) == 2 for v in by_step.values())

    per_worker = VAL_N // 2            # each worker validates its own half (sharded)
    val_losses = []
    for epoch, step in enumerate(ends, start=1):
        chief, worker = by_step[step]["chief-0"], by_step[step]["worker-0"]
        want_loss, want_acc = truth(read_json(run, f"weights-{epoch}.json"), xv, yv)
        val_losses.append(want_loss)
        glob = chief["global"]
        assert glob == worker["global"]
        assert math.isclose(glob["val_loss"], want_loss, rel_tol=1e-4), (epoch, glob, want_loss)
        assert math.isclose(glob["val_accuracy"], want_acc, abs_tol=1e-6), (epoch, glob, want_acc)
        # each worker's own validation values: from its own half, which together give the truth
        mine = [chief["metrics"], worker["metrics"]]
        for m in mine:
            assert abs(m["val_accuracy"] * per_worker - round(m["val_accuracy"] * per_worker)) < 1e-3
        assert math.isclose(sum(m["val_accuracy"] for m in mine) / 2, want_acc, abs_tol=1e-6)
        assert math.isclose(sum(m["val_loss"] for m in mine) / 2, want_loss, rel_tol=1e-4)
        assert mine[0]["val_loss"] != mine[1]["val_loss"]
        if epoch > 1:   # every=STEPS: this line's window is the whole epoch, as History's value
            assert math.isclose(glob["accuracy"], history["accuracy"][epoch - 1], abs_tol=1e-6)
            assert math.isclose(chief["global"]["loss"], history["loss"][epoch - 1], rel_tol=1e-4)
            window = STEPS * BATCH // 2   # this worker's examples in the window
            for m in mine:
                assert abs(m["accuracy"] * window - round(m["accuracy"] * window)) < 1e-3
            assert math.isclose(sum(m["accuracy"] for m in mine) / 2, glob["accuracy"], abs_tol=1e-6)
    # Keras' own epoch-end validation numbers agree with the independent ones (sanity of truth())
    assert np.allclose(history["val_loss"], val_losses, rtol=1e-4)

    for step, tasks in by_step.items():   # the schedule, evaluated at the optimizer's iterations
        assert math.isclose(tasks["chief-0"]["global"]["learning_rate"],
                            0.5 * 0.5 ** (step / STEPS), rel_tol=1e-5), step
        assert "val_loss" not in tasks["chief-0"]["global"] or step in ends

    # keep-best by val_loss: the last checkpoint and the one with the lowest true val_loss
    best = ends[int(np.argmin(val_losses))]
    assert best != ends[-1], val_losses          # the data makes this a real choice
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert set(listed) == {best, ends[-1]}, sorted(listed)
    assert math.isclose(listed[best]["metrics"]["val_loss"], min(val_losses), rel_tol=1e-4)
    # TensorBoard (tfconsole tensorboard RUN reads these): every line, accuracy and validation too
    assert_tensorboard_holds_every_line(run, lines, ("accuracy",))


KERAS3 = """
import json, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np, tfconsole
keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
rng = np.random.RandomState(0)
x = rng.normal(size=(640, 4)).astype("float32")
xv = rng.normal(size=(96, 4)).astype("float32")
y, yv = x.sum(axis=1, keepdims=True), xv.sum(axis=1, keepdims=True)
h = model.fit(x, y, batch_size=32, epochs=2, validation_data=(xv, yv), validation_freq=2,
              callbacks=[tfconsole.KerasCallback(every=5)], verbose=0)
kernel, bias = (v.tolist() for v in model.get_weights())
print("RESULT", json.dumps({"kernel": kernel, "bias": bias, "xv": xv.tolist(), "yv": yv.tolist(),
                            "keras": keras.__version__}))
"""


@pytest.mark.slow
def test_keras3_under_mirrored_strategy_reports_metrics_and_validates_every_second_epoch(tmp_path):
    """Keras 3, one worker with two replicas (its fit fails under MWMS, facts #1): mae per worker,
    val_loss/val_mae only on the epoch that validated (validation_freq=2), equal to numpy on the
    final weights, and the learning rate."""
    from tests.unit.test_client import _env, _python, _unpack
    run = tmp_path / "run"
    _unpack(run)
    env = {k: v for k, v in _env(run, 0).items() if k != "TF_CONFIG"}
    env.update(TFCONSOLE_TASK="worker-0", TF_CPP_MIN_LOG_LEVEL="2")
    out = json.loads(_python(KERAS3, env, tmp_path).split("RESULT ", 1)[1])
    assert out["keras"].startswith("3.")
    lines = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert sorted(lines) == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    assert all("mae" in m["metrics"] and m["global"]["learning_rate"] == pytest.approx(0.05)
               for m in lines.values())
    assert not any("val_loss" in m["global"] for s, m in lines.items() if s != 40)
    pred = np.asarray(out["xv"]) @ np.asarray(out["kernel"]) + np.asarray(out["bias"])
    err = pred - np.asarray(out["yv"])
    last = lines[40]
    assert math.isclose(last["global"]["val_loss"], float(np.mean(err ** 2)), rel_tol=1e-4)
    assert math.isclose(last["global"]["val_mae"], float(np.mean(np.abs(err))), rel_tol=1e-4)
    assert last["metrics"]["val_mae"] == pytest.approx(last["global"]["val_mae"])   # one worker
