"""Two real worker processes (TF_CONFIG on localhost ports) against a one-worker run."""
import json
import os
from collections import defaultdict

from backend.client.harness import ckpt_index

from .conftest import TrainedRun, read_metrics

# The synthetic job cuts the data into GLOBAL batches and gives each worker a slice, so a step
# sees the same 64 examples with 1 or 2 workers and the gradients are equal in exact arithmetic.
# Only float32 rounding differs (the all-reduce sums two halves, one worker sums one batch):
# measured relative differences are ~1e-7 after 200 steps; 1e-4 leaves room for a chaotic
# amplification without letting a real bug (wrong loss scaling is a factor of 2) through.
REL_TOL = 1e-4


def by_step(metrics):
    steps = defaultdict(dict)
    for m in metrics:
        steps[m["step"]][m["task"]] = m
    return steps


def test_metrics_lines_follow_the_contract(trained_run):
    total = TrainedRun.EPOCHS * TrainedRun.STEPS_PER_EPOCH
    steps = by_step(trained_run.metrics)
    # Every log_every steps, and the first step (its loss reaches the console at once).
    assert sorted(steps) == [1] + list(range(10, total + 1, 10))
    for step, rows in steps.items():
        assert set(rows) == {"worker-0", "worker-1"}
        for row in rows.values():
            assert row["run_id"] == "shared" and row["attempt"] == 0
            assert row["epoch"] == (step - 1) // TrainedRun.STEPS_PER_EPOCH + 1
            if step == 1:   # no step has run before the first one: nothing to time
                assert row["step_time"] is None and row["examples_per_sec"] is None
            else:
                assert row["step_time"] > 0 and row["examples_per_sec"] > 0
    train = json.load(open(os.path.join(trained_run.run_dir, "train.json")))
    assert train["total_steps"] == total and train["num_workers"] == 2
    assert train["tasks"] == ["worker-0", "worker-1"] and train["start_step"] == 0
    assert os.listdir(os.path.join(trained_run.run_dir, "tensorboard"))


def test_tensorboard_holds_every_metrics_step_with_its_values(trained_run):
    """TensorBoard's scalars (written in batches about once a second) are the metrics lines'
    figures at the same steps: none dropped, none doubled, the last one flushed at the end."""
    import tensorflow as tf
    folder = os.path.join(trained_run.run_dir, "tensorboard")
    found = defaultdict(dict)
    for name in os.listdir(folder):
        if not name.startswith("events."):   # validation/: its own run (test_metrics.py)
            continue
        for record in tf.data.TFRecordDataset(os.path.join(folder, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                assert value.tag not in found[event.step], (value.tag, event.step)
                found[event.step][value.tag] = float(tf.make_ndarray(value.tensor))
    steps = by_step(trained_run.metrics)
    assert sorted(found) == sorted(steps)
    for step, rows in steps.items():
        assert abs(found[step]["loss/global"] - rows["worker-0"]["global"]["loss"]) <= 1e-5 * max(1.0, abs(rows["worker-0"]["global"]["loss"]))
        for task, row in rows.items():
            assert abs(found[step][f"loss/{task}"] - row["metrics"]["loss"]) <= 1e-5 * max(1.0, abs(row["metrics"]["loss"]))


def test_local_losses_differ_and_global_is_their_mean(trained_run):
    steps = by_step(trained_run.metrics)
    differ = 0
    for rows in steps.values():
        a, b = rows["worker-0"]["metrics"]["loss"], rows["worker-1"]["metrics"]["loss"]
        differ += a != b
        mean = (a + b) / 2
        for row in rows.values():
            assert abs(row["global"]["loss"] - mean) <= 1e-6 * max(1.0, abs(mean))
    assert differ == len(steps), "each worker reports its own data's loss"
    first, last = steps[10]["worker-0"]["global"]["loss"], steps[max(steps)]["worker-0"]["global"]["loss"]
    assert last < 0.5 * first, "the loss drops visibly"


def test_two_workers_match_one_worker(trained_run, launcher, tmp_path):
    run = str(tmp_path / "single")
    cluster = launcher.start(run, n=1, params=TrainedRun.PARAMS, run_id="single")
    assert cluster.wait() == [0], cluster.tails()
    one = by_step(read_metrics(run))
    two = by_step(trained_run.metrics)
    assert sorted(one) == sorted(two)
    final = max(one)
    g1, g2 = one[final]["worker-0"]["global"]["loss"], two[final]["worker-0"]["global"]["loss"]
    assert abs(g1 - g2) <= REL_TOL * abs(g1), (g1, g2)


def test_every_worker_saved_the_same_complete_checkpoints(trained_run):
    chief = os.path.join(trained_run.run_dir, "checkpoints")
    other = os.path.join(trained_run.run_dir, "worker_checkpoints", "worker-1")
    a, b = ckpt_index.list_complete(chief), ckpt_index.list_complete(other)
    assert [c["step"] for c in a] == [c["step"] for c in b] == [50, 100, 150, 200]
    meta = a[-1]
    assert set(meta["losses"]) == {"worker-0", "worker-1"}
    assert {"step", "epoch", "global_loss", "time", "tensorflow", "keras"} <= set(meta)
    # Each worker holds a full copy of the variables (docs/facts.md #5): same bytes.
    for name in ("ckpt-200.index", "ckpt-200.data-00000-of-00001"):
        assert open(os.path.join(chief, name), "rb").read() == \
            open(os.path.join(other, name), "rb").read()
