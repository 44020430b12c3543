"""A save-stop (`stop --save`, a sweep's prune) of a user's own tf_keras ``model.fit`` stops at
the next sync point: both workers save one step and exit 75 there, before the epoch's
validation. tf_keras runs validation after a ``stop_training`` break, so a pruned trial ran 41 s
on (its validation), past the sweep's 30 s save window. Two local workers under
MultiWorkerMirroredStrategy; the script below is a tutorial's fit with a validation set whose
batches are slow, and prints when its validation begins."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.client.harness import ckpt_index, preempt, requests_dir
from tests.conftest import wait_for
from tests.harness.conftest import free_ports, read_metrics, ship, worker_env

SCRIPT = """\
import time
import numpy as np
import tensorflow as tf
import tf_keras as keras
import tfconsole

class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.01)
    def on_test_begin(self, logs=None):
        print("validation began", flush=True)
    def on_test_batch_end(self, batch, logs=None):
        time.sleep(0.5)   # 40 batches: 20 s of validation

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
x = np.random.default_rng(0).normal(size=(640, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
train = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
val = tf.data.Dataset.from_tensor_slices((x[:320], y[:320])).batch(8)
model.fit(train, epochs=1, steps_per_epoch=100000, validation_data=val,
          callbacks=[Slow(), tfconsole.KerasCallback(batch_size=32)], verbose=0)
print("fit returned", flush=True)
"""


@pytest.mark.slow
def test_a_save_stop_of_fit_exits_at_the_next_sync_point_before_validation(tmp_path):
    run = tmp_path / "run"
    ship(str(run))
    (run / "logs").mkdir()
    script = tmp_path / "fit_slow_validation.py"
    script.write_text(SCRIPT)
    ports = free_ports(2)
    procs, logs = [], []
    try:
        for i in range(2):
            env = worker_env({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                              "task": {"type": "worker", "index": i}}, str(run / "tmp" / f"worker-{i}"))
            env.update({"TFCONSOLE_RUN_DIR": str(run), "TFCONSOLE_RUN_ID": "k", "TFCONSOLE_TASK": f"worker-{i}",
                        "TF_USE_LEGACY_KERAS": "1", "PYTHONPATH": str(run / "lib")})
            logs.append(run / "logs" / f"worker-{i}.log")
            with open(logs[-1], "w") as fh:
                procs.append(subprocess.Popen([sys.executable, str(script)], stdout=fh, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))
        wait_for(lambda: any(m["step"] >= 20 for m in read_metrics(str(run))), 180, "step 20")
        # What the console's stop --save (and a prune) leaves on the chief's host.
        os.makedirs(requests_dir.folder(str(run)), exist_ok=True)
        (Path(requests_dir.folder(str(run))) / f"{requests_dir.STOP}prune.json").write_text("{}")
        t0 = time.time()
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=90))
            except subprocess.TimeoutExpired:
                raise AssertionError("a worker trained on after the save-stop:\n"
                                     + "\n".join(log.read_text()[-1500:] for log in logs)) from None
        elapsed = time.time() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    texts = [log.read_text() for log in logs]
    assert codes == [preempt.EXIT_CODE] * 2, "\n".join(t[-1500:] for t in texts)
    assert not [t for t in texts if "validation began" in t or "fit returned" in t], "\n".join(t[-800:] for t in texts)
    steps = {int(ln.split("saved at step ")[1].split()[0]) for t in texts for ln in t.splitlines()
             if "PREEMPTED: saved at step" in ln}
    assert len(steps) == 1, steps
    step = steps.pop()
    assert step in {c["step"] for c in ckpt_index.list_complete(str(run / "checkpoints"))}
    done = json.loads((Path(requests_dir.folder(str(run))) / f"{requests_dir.STOP}prune.done").read_text())
    assert done["step"] == step   # the request answered with the saved step, as the console reads it
    print(f"fit: save-stop to both exited in {elapsed:.1f} s at step {step}")
