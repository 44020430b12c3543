"""A custom training loop (``strategy.run``) as TensorFlow's tutorial writes it, plus the
documented ``tfconsole`` lines only (tests/integration/ctl/tutorial.py, each marked), as a
``kind: command`` job over SSH.

Real parts: two workers (chief on 127.0.0.2, worker on 127.0.0.3, separate run folders) under
MultiWorkerMirroredStrategy with Keras 3, the script's own ``tf.train.CheckpointManager``
(``max_to_keep=1``, as the tutorial), the console's monitor, Save now, the checkpoint list,
Export (verified in a fresh process) and Restore.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend import checkpoints
from backend.config.spec import job_from_dict
from backend.runs import launcher, restore
from backend.runs.store import RunStore
from backend.watch.metrics import MetricsStore
from tests.conftest import processes_of, wait_for
from tests.integration.test_keras_fit import assert_tensorboard_holds_every_line, metrics

CTL = Path(__file__).resolve().parent / "ctl"
EPOCHS, STEPS = 2, 60


def tutorial_job(python: str, pace: float):
    return job_from_dict({"kind": "command",
                          "command": [python, str(CTL / "tutorial.py"), str(EPOCHS), str(STEPS), str(pace)],
                          # A shrink's scale (keep_replica_batch) as the keeper sets it after a
                          # lost host (tests/faults/test_spare_hosts.py has a real one): the loop
                          # applies it to the optimizer it was given.
                          "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TFCONSOLE_LR_SCALE": "0.5"}})


def printed_epoch_losses(log: str) -> list[float]:
    """The tutorial's own 'Epoch: N, accuracy: A, train_loss: L.' lines (strategy.reduce SUM)."""
    return [float(line.rsplit("train_loss:", 1)[1].strip(" .")) for line in log.splitlines()
            if line.startswith("Epoch:")]


CHECK_EXPORT = """
import sys, json
sys.path.insert(0, {ctl!r})
import numpy as np, tensorflow as tf, keras, mnist_setup
x = mnist_setup.mnist_dataset()[0][:16]
model = mnist_setup.build_cnn_model()             # the script's own model, not export's rebuild
tf.train.Checkpoint(model=model).restore({prefix!r}).expect_partial()
want = model(x).numpy()
got = keras.models.load_model({keras_file!r}, compile=False)(x).numpy()
loaded = tf.saved_model.load({saved_model!r})   # keep a reference: its variables die with it
served = loaded.serve(x).numpy()
print("DIFF", json.dumps([float(np.abs(got - want).max()), float(np.abs(served - want).max())]))
"""


@pytest.mark.slow
def test_the_tutorial_loop_gets_curves_save_now_listed_checkpoints_export_and_restore(
        ssh_cluster, ssh_options, python_path, tmp_path):
    run = launcher.launch(ssh_cluster, tutorial_job(python_path, 0.1),
                          store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        wait_for(lambda: sorted(store.tasks()) == ["chief-0", "worker-0"]
                 and min(len(store.series(t)) for t in store.tasks()) >= 2, 180,
                 "two metric points from each worker")
        saved = checkpoints.save_now(run, wait_s=120)
        # The answer is a step the list shows (the tutorial's manager keeps one checkpoint: a
        # hold, as the console's pick takes, keeps this one through the epoch ends).
        hold = checkpoints.pin(run, saved, purpose="restore", ttl_s=600)
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run)]
        run.wait(timeout=300)
    finally:
        monitor.stop()
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    assert 0 < saved < EPOCHS * STEPS and saved % 10 == 0

    # Per-worker curves: every worker's own loss and accuracy at the same steps.
    lines = metrics(run)
    by_task = {t: [m for m in lines if m["task"] == t] for t in ("chief-0", "worker-0")}
    assert [m["step"] for m in by_task["chief-0"]] == [m["step"] for m in by_task["worker-0"]]
    assert any(a["metrics"]["loss"] != b["metrics"]["loss"] for a, b in zip(*by_task.values()))
    assert all("train_accuracy" in m["metrics"] for m in by_task["chief-0"][:3])
    assert_tensorboard_holds_every_line(run, lines, ("train_accuracy",))
    # The own-loss rule: the workers' losses (compute_average_loss x replicas) averaged over the
    # epoch's windows equal the tutorial's own printed train_loss (strategy.reduce SUM).
    chief = by_task["chief-0"]
    prev, total = 0, 0.0
    for m in [m for m in chief if m["step"] <= STEPS]:
        total += (m["step"] - prev) * m["global"]["loss"]
        prev = m["step"]
    assert prev == STEPS   # the epoch-end save is a sync point: its line is at step 60
    log = run.log_tail("chief-0", 1_000_000)
    printed = printed_epoch_losses(log)
    assert "tfconsole: learning rate 0.001 x 0.5 = 0.0005 (the run shrank)" in log
    assert abs(total / STEPS - printed[0]) < 1e-4 * printed[0], (total / STEPS, printed)

    # Listed: the Save-now step (held), the last epoch end (the manager's max_to_keep=1) and the
    # loop's keep_best=2 by train_accuracy (max), with step, losses and metrics.
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    accuracy = {m["step"]: m["global"]["train_accuracy"] for m in chief
                if m["step"] in (saved, STEPS, EPOCHS * STEPS)}
    best = sorted(accuracy, key=accuracy.get)[-2:]
    assert STEPS in best, accuracy   # the data makes it a real choice: max_to_keep=1 dropped it
    assert set(listed) == {saved, EPOCHS * STEPS, *best}, (sorted(listed), accuracy)
    assert listed[STEPS]["metrics"]["train_accuracy"] == pytest.approx(accuracy[STEPS], rel=1e-5)
    last = listed[EPOCHS * STEPS]
    assert last["epoch"] == EPOCHS and set(last["losses"]) == {"chief-0", "worker-0"}
    assert "train_accuracy" in last["metrics"] and last["metrics"]["loss"] == last["global_loss"]

    # Export: rebuilt with no strategy from what the loop registered, verified in a fresh process.
    result = checkpoints.export(run, step=saved, name="ctl")
    assert result["match"] is True and result["step"] == saved
    code = CHECK_EXPORT.format(ctl=str(CTL), prefix=listed[saved]["prefix"],
                               keras_file=result["paths"]["keras"],
                               saved_model=result["paths"]["savedmodel"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert max(json.loads(out.stdout.split("DIFF ", 1)[1])) <= 1e-5

    # Restore: the new attempt's first step is the next step, on both workers.
    restore.restore(run, saved, hold=hold)
    run.wait(timeout=300)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    resumed = [m for m in metrics(run) if m["attempt"] == run.state.attempt]
    assert resumed[0]["step"] == saved + 1 and resumed[-1]["step"] == EPOCHS * STEPS, resumed[:2]
    assert {m["task"] for m in resumed} == {"chief-0", "worker-0"}
    assert "x 0.5 = 0.0005 (the run shrank)" in run.log_tail("worker-0", 1_000_000).split("restored step")[-1]
    assert processes_of(run) == []
