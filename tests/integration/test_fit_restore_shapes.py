"""Restore tells the truth for the shapes real `fit` scripts take (issue 46, docs/job-contract.md
"Restore and fit"): a script with Keras' own `BackupAndRestore` beside the callback, restored while
it lives and after it finished; and a script that fits twice, the second time on a new model
object (the Keras guide's `run_training()` pattern), restored after it finished.

Real parts: tf_keras `model.fit` under MultiWorkerMirroredStrategy, two local workers, a `kind:
command` job; `restore.restore` as the console and the CLI call it. Each attempt's first step,
last step and the checkpoints kept are read from the run's own files.
"""
from __future__ import annotations

import pytest

from backend import checkpoints
from backend.config.spec import job_from_dict
from backend.runs import launcher, restore
from backend.runs.store import RunStore
from tests.conftest import processes_of, wait_for
from tests.integration.test_keras_fit import metrics

pytestmark = pytest.mark.slow
EPOCHS, STEPS = 4, 10

HEAD = f"""
import os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras, tfconsole
strategy = tf.distribute.MultiWorkerMirroredStrategy()
pace = float(sys.argv[1])
def build():
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model
x = np.random.RandomState(0).normal(size=(2048, 4)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).repeat().batch(32)
slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(pace))
STEPS = {STEPS}
"""

# The callback first, Keras' BackupAndRestore after it: B&R's on_train_begin runs last and
# loads its own backup (before the fix it won: a newer epoch while live, epoch 0 after the end).
WITH_BACKUP = HEAD + f"""
backup = keras.callbacks.BackupAndRestore(os.path.join(tfconsole.context().run_dir, "bar-backup"))
model = build()
model.fit(ds, epochs={EPOCHS}, steps_per_epoch=STEPS, verbose=0,
          callbacks=[tfconsole.KerasCallback(every=5), backup, slow])
print("fit done", flush=True)
"""

# Two fits, the second on a new model object: one rising step count, one resume per attempt.
TWO_MODELS = HEAD + f"""
build().fit(ds, epochs={EPOCHS // 2}, steps_per_epoch=STEPS, verbose=0,
            callbacks=[tfconsole.KerasCallback(every=5), slow])
build().fit(ds, epochs={EPOCHS // 2}, steps_per_epoch=STEPS, verbose=0,
            callbacks=[tfconsole.KerasCallback(every=5), slow])
print("fit done", flush=True)
"""


def _launch(local_cluster, python_path, tmp_path, script: str, pace: float):
    path = tmp_path / "fit_shape.py"
    path.write_text(script)
    job = job_from_dict({"kind": "command", "command": [python_path, str(path), str(pace)],
                         "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})
    return launcher.launch(local_cluster, job, store=RunStore(tmp_path / "runs"),
                           preflight=launcher.Preflight.SKIP)


def _attempt_steps(run) -> dict[str, list[int]]:
    """This attempt's steps on each worker's lines, in the order they were written."""
    lines = [m for m in metrics(run) if m["attempt"] == run.state.attempt]
    return {t: [m["step"] for m in lines if m["task"] == t] for t in ("worker-0", "worker-1")}


def _restored(run, step: int) -> None:
    """Restore ``step``, wait for the end; every worker resumed there, said so, and trained on
    from the next step to the last without a step twice."""
    result = restore.restore(run, step)
    assert result.resumed == {"worker-0": step, "worker-1": step}, result.summary()
    run.wait(timeout=300)
    assert run.state.phase == "finished", run.log_tail("worker-0")
    for task, steps in _attempt_steps(run).items():
        assert steps[0] == step + 1 and steps[-1] == EPOCHS * STEPS, (task, step, steps)
        assert steps == sorted(set(steps)), (task, steps)


def test_a_fit_with_backup_and_restore_resumes_where_restore_says_live_and_after_the_end(
        local_cluster, python_path, tmp_path):
    run = _launch(local_cluster, python_path, tmp_path, WITH_BACKUP, pace=0.15)
    try:
        # Live, past the second epoch's end: BackupAndRestore's backup holds a newer epoch.
        wait_for(lambda: any(m["step"] >= 25 for m in metrics(run)), 180, "step 25")
        _restored(run, STEPS)
        # After the end: BackupAndRestore removed its backup (its own state says epoch 0).
        _restored(run, 2 * STEPS)
        assert "BackupAndRestore's backup set aside: the console resumes at step 20" in run.log_tail("worker-0")
    finally:
        if run.state.live:
            run.stop(grace_s=5)
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert [listed[STEPS * e]["epoch"] for e in range(1, EPOCHS + 1)] == [1, 2, 3, 4], listed
    assert processes_of(run) == []


def test_a_script_that_fits_a_new_model_resumes_once_and_counts_on(local_cluster, python_path, tmp_path):
    run = _launch(local_cluster, python_path, tmp_path, TWO_MODELS, pace=0.0)
    run.wait(timeout=300)
    assert run.state.phase == "finished", run.log_tail("worker-0")
    assert _attempt_steps(run)["worker-0"][-1] == EPOCHS * STEPS
    # Restore inside the first fit: it trains on to its end, the second fit's new model is not
    # restored again and counts on (before: it was, and steps 11-30 came twice in one attempt).
    _restored(run, STEPS)
    log = run.log_tail("worker-0", 1_000_000).split("tfconsole attempt 2", 1)[-1]
    assert log.count("tfconsole: restored step") == 1, log[-3000:]
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert [listed[STEPS * e]["epoch"] for e in range(1, EPOCHS + 1)] == [1, 2, 3, 4], listed
    assert processes_of(run) == []
