"""Named metrics in harness jobs (issue 34): ``metrics_fn``, validation, the learning rate,
keep-best by any metric, TensorBoard and the NaN check, on real worker processes.

The two-worker run trains examples/synthetic.py (the default demo job: it reports ``mae`` and
validates at each epoch end); its validation values are checked against a plain model, with no
strategy, restored from the checkpoint of that step and run over the same validation data.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
from collections import defaultdict

import pytest

from backend.client.harness import ckpt_index, jobs, rows

from .conftest import SYNTHETIC, Launcher, read_metrics

SPE, EPOCHS, SEED, VAL_STEPS = 20, 3, 5, 3
PARAMS = (f"epochs={EPOCHS}", f"steps_per_epoch={SPE}", "log_every=10", "checkpoint_every=10",
          "keep_checkpoints=1", "keep_best_checkpoints=2", "keep_best_metric=val_loss",
          "checkpoint_grace_s=0", f"seed={SEED}", f"val_steps={VAL_STEPS}")
TASKS = ("worker-0", "worker-1")


def close(a: float, b: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(b))


# ---- pure: the row and its fold -----------------------------------------------------------------
def test_fold_gives_each_workers_own_value_and_the_summed_state_as_global():
    layout = rows.val_layout(["acc"])
    # worker-1 has two replicas; its rows sum to its state (rows.py's rule).
    found = [layout.read(layout.vector({"task_index": 0, "loss/total": 6, "loss/count": 4,
                                        "acc/total": 3, "acc/count": 4})),
             layout.read(layout.vector({"task_index": 1, "loss/total": 1, "loss/count": 2,
                                        "acc/total": 2, "acc/count": 2})),
             layout.read(layout.vector({"task_index": 1, "loss/total": 1, "loss/count": 2,
                                        "acc/total": 0, "acc/count": 2}))]
    folded = rows.fold(found, TASKS, layout)
    assert folded.values == {"worker-0": {"loss": 1.5, "acc": 0.75},
                             "worker-1": {"loss": 0.5, "acc": 0.5}}
    assert folded.global_ == {"loss": 1.0, "acc": 5 / 8}   # not the mean of workers (0.625)


def test_metric_names_and_keep_best_params_are_refused_with_the_reason(tmp_path):
    assert rows.name_problems(["acc", "val_acc", "loss", ""], validation=True) == [
        "metric name 'val_acc' starts with 'val_', which the harness gives validation values",
        "metric name 'loss' is the harness's own", "a metric name must not be empty"]
    job = tmp_path / "j.py"
    job.write_text("def build_model(): pass\ndef make_dataset(c, b, s): pass\n"
                   "def loss_fn(y, p): pass\ndef make_optimizer(): pass\n")
    module = jobs.load_job(str(job))
    for override, message in (("keep_best_mode=best", "keep_best_mode must be min or max"),
                              ("val_every=5", "defines no make_val_dataset"),
                              ("val_steps=0", "val_steps must be >= 1")):
        with pytest.raises(jobs.JobError, match=message):
            jobs.settle_params(module, [override])


# ---- two real workers -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def metrics_run(tmp_path_factory):
    lw = Launcher()
    try:
        run_dir = str(tmp_path_factory.mktemp("metrics") / "run")
        cluster = lw.start(run_dir, n=2, params=PARAMS, run_id="m")
        assert cluster.wait() == [0, 0], cluster.tails()
        yield run_dir
    finally:
        lw.kill_all()


def by_step(run_dir):
    steps = defaultdict(dict)
    for m in read_metrics(run_dir):
        steps[m["step"]][m["task"]] = m
    return steps


def _plain_validation(run_dir: str, step: int) -> dict:
    """val_loss and val_mae per worker and over both, from a plain Keras model (no strategy)
    restored from the chief's checkpoint at ``step``, over each worker's validation shard."""
    import tensorflow as tf
    spec = importlib.util.spec_from_file_location("synthetic_plain", SYNTHETIC)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    job.PARAMS = json.load(open(os.path.join(run_dir, "train.json")))["params"]
    model = job.build_model()
    prefix = os.path.join(run_dir, "checkpoints", f"ckpt-{step}")
    tf.train.Checkpoint(model=model).restore(prefix).expect_partial()
    per_replica = 64 // 2
    sums = {}
    for i, task in enumerate(TASKS):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i,
                                         num_replicas_in_sync=2)
        losses, maes = [], []
        for x, y in job.make_val_dataset(ctx, per_replica, SEED).take(VAL_STEPS):
            p = model(x, training=False)
            losses += list(job.loss_fn(y, p).numpy())
            maes += list(job.metrics_fn(y, p)["mae"].numpy())
        sums[task] = (losses, maes)
    out = {t: {"val_loss": sum(ls) / len(ls), "val_mae": sum(ms) / len(ms)}
           for t, (ls, ms) in sums.items()}
    every_loss = [v for ls, _ in sums.values() for v in ls]
    every_mae = [v for _, ms in sums.values() for v in ms]
    out["global"] = {"val_loss": sum(every_loss) / len(every_loss),
                     "val_mae": sum(every_mae) / len(every_mae)}
    return out


@pytest.mark.slow
def test_lines_carry_each_workers_and_global_metrics_and_validation_matches_a_plain_model(metrics_run):
    steps = by_step(metrics_run)
    val_steps = [s for s, r in steps.items() if "val_loss" in r["worker-0"].get("global", {})]
    assert val_steps == [SPE, 2 * SPE, 3 * SPE]     # each epoch end, nowhere else
    for step, lines in steps.items():
        assert set(lines) == set(TASKS)
        for line in lines.values():
            assert line["global"]["learning_rate"] == 0.01
            assert math.isfinite(line["metrics"]["mae"])
        # Equal counts on both workers: the summed state is the mean of the two.
        mean = (lines["worker-0"]["metrics"]["mae"] + lines["worker-1"]["metrics"]["mae"]) / 2
        assert close(lines["worker-0"]["global"]["mae"], mean, 1e-6)
    assert steps[SPE]["worker-0"]["metrics"]["mae"] != steps[SPE]["worker-1"]["metrics"]["mae"]
    # The last validation is at the last step, whose checkpoint is always kept.
    last = 3 * SPE
    truth = _plain_validation(metrics_run, last)
    for task in TASKS:
        for name in ("val_loss", "val_mae"):
            assert close(steps[last][task]["metrics"][name], truth[task][name]), (task, name)
            assert close(steps[last][task]["global"][name], truth["global"][name]), name
    meta = ckpt_index.list_complete(os.path.join(metrics_run, "checkpoints"))[-1]
    assert meta["step"] == last
    assert close(meta["metrics"]["val_loss"], truth["global"]["val_loss"])
    assert meta["metrics"]["learning_rate"] == 0.01


@pytest.mark.slow
def test_keep_best_by_val_loss_keeps_the_best_validated_steps(metrics_run):
    steps = by_step(metrics_run)
    validated = {s: r["worker-0"]["global"]["val_loss"] for s, r in steps.items()
                 if "val_loss" in r["worker-0"].get("global", {})}
    best_two = sorted(validated, key=validated.get)[:2]
    for folder in ("checkpoints", "worker_checkpoints/worker-1"):
        kept = [c["step"] for c in ckpt_index.list_complete(os.path.join(metrics_run, folder))]
        # keep_checkpoints=1 (the last) + the 2 best by val_loss; 10, 30, 50 had no validation.
        assert kept == sorted({3 * SPE, *best_two}), (folder, kept, validated)


@pytest.mark.slow
def test_tensorboard_carries_every_metric_and_validation_as_its_own_run(metrics_run):
    import tensorflow as tf
    folder = os.path.join(metrics_run, "tensorboard")

    def scalars(path):
        found = defaultdict(dict)
        for name in os.listdir(path):
            if name.startswith("events."):
                for event in tf.compat.v1.train.summary_iterator(os.path.join(path, name)):
                    for value in event.summary.value:
                        found[event.step][value.tag] = float(tf.make_ndarray(value.tensor))
        return found

    train, val = scalars(folder), scalars(os.path.join(folder, "validation"))
    steps = by_step(metrics_run)
    assert sorted(train) == sorted(steps) and sorted(val) == [SPE, 2 * SPE, 3 * SPE]
    for step, lines in steps.items():
        g = lines["worker-0"]["global"]
        assert close(train[step]["mae/global"], g["mae"], 1e-5)
        assert close(train[step]["learning_rate/global"], 0.01, 1e-6)
        for task, line in lines.items():
            assert close(train[step][f"loss/{task}"], line["metrics"]["loss"], 1e-5)
            assert close(train[step][f"mae/{task}"], line["metrics"]["mae"], 1e-5)
            if step in val:
                assert close(val[step][f"loss/{task}"], line["metrics"]["val_loss"], 1e-5)
                assert close(val[step][f"mae/{task}"], line["metrics"]["val_mae"], 1e-5)
        if step in val:
            assert set(val[step]) == {f"{m}/{t}" for m in ("loss", "mae") for t in (*TASKS, "global")}
            assert close(val[step]["loss/global"], g["val_loss"], 1e-5)


# ---- a metric turns NaN; a learning-rate schedule -----------------------------------------------
SCHEDULED_NAN_JOB = f'''
import importlib.util
import keras
import tensorflow as tf

_spec = importlib.util.spec_from_file_location("synthetic", {SYNTHETIC!r})
_s = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s)
DEFAULTS = {{"hidden": 8}}
PARAMS = dict(DEFAULTS)


def make_dataset(ctx, batch_size, seed):
    return _s.make_dataset(ctx, batch_size, seed)


def build_model():
    _s.PARAMS = PARAMS
    return _s.build_model()


loss_fn = _s.loss_fn


def metrics_fn(labels, predictions):   # the log of a negative number: NaN
    return {{"log_err": tf.math.log(tf.reduce_mean(labels - predictions, axis=-1) - 1e3)}}


def make_optimizer():
    return keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(
        0.01, decay_steps=10, decay_rate=0.5, staircase=True))
'''


@pytest.mark.slow
def test_a_nan_metric_is_flagged_and_the_learning_rate_follows_its_schedule(tmp_path):
    job = tmp_path / "nan_metric.py"
    job.write_text(SCHEDULED_NAN_JOB)
    lw = Launcher()
    try:
        run = str(tmp_path / "run")
        cluster = lw.start(run, n=1, job=str(job), params=("epochs=1", "steps_per_epoch=30"))
        assert cluster.wait() == [0], cluster.tails()
        assert "NON-FINITE METRIC at step 1: worker-0 log_err nan" in cluster.log(0)
        health = json.load(open(os.path.join(run, "health.json")))
        assert health["step"] == 1 and health["metrics"] == {"worker-0": {"log_err": "nan"}}
        assert health["losses"] == {}      # the loss itself was fine
        # The rate each sync step used: 0.01 halved every 10 steps (step 10 is iteration 9).
        lrs = {m["step"]: m["global"]["learning_rate"] for m in read_metrics(run)}
        assert lrs == {1: 0.01, 10: 0.01, 20: 0.005, 30: 0.0025}
        stopped = str(tmp_path / "stopped")
        cluster = lw.start(stopped, n=1, job=str(job), params=("epochs=1", "steps_per_epoch=30",
                                                               "stop_on_nan=true"))
        assert cluster.wait() == [1]
        assert ("HARNESS FAILED: NonFiniteLoss: metric log_err is not finite at step 1"
                in cluster.log(0)), cluster.tails()
    finally:
        lw.kill_all()
