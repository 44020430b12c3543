"""SIGTERM (a cluster's preemption, a time limit's warning) to ONE worker of a real two-worker
run: every worker saves the same step and exits with the preempted status (issue 29 item 1)."""
import json
import os
import signal
import time

from backend.client.harness import ckpt_index, preempt

from .conftest import read_metrics
from tests.conftest import wait_for

GRACE_S = 25


def _preempt_one(launcher, tmp_path, sig):
    run = str(tmp_path / "run")
    # No scheduled save (checkpoint_every=0, one endless epoch): a checkpoint can only come
    # from the signal. pace_s leaves the cores to others and keeps the run far from its end.
    cluster = launcher.start(run, n=2, params=["epochs=1", "steps_per_epoch=100000", "log_every=10",
                                               "checkpoint_every=0", "pace_s=0.005",
                                               f"preempt_grace_s={GRACE_S}"])
    wait_for(lambda: any(m["step"] >= 20 for m in read_metrics(run)), 120, "step 20")
    t0 = time.time()
    os.kill(cluster.procs[1].pid, sig)
    codes = cluster.wait(timeout=90)
    elapsed = time.time() - t0
    return run, cluster, codes, elapsed


def _saved_step(cluster, i):
    last = cluster.log(i).strip().splitlines()[-1]
    assert "HARNESS PREEMPTED: saved at step" in last, cluster.tails()
    return int(last.split("saved at step ")[1].split()[0])


def test_sigterm_to_one_worker_saves_the_same_step_on_both(launcher, tmp_path):
    run, cluster, codes, elapsed = _preempt_one(launcher, tmp_path, signal.SIGTERM)
    assert codes == [preempt.EXIT_CODE, preempt.EXIT_CODE], cluster.tails()
    steps = {_saved_step(cluster, 0), _saved_step(cluster, 1)}
    assert len(steps) == 1, cluster.tails()
    step = steps.pop()
    assert step % 10 == 0 and step < 100000     # a sync point, long before the end
    chief = {c["step"] for c in ckpt_index.list_complete(os.path.join(run, "checkpoints"))}
    other = {c["step"] for c in ckpt_index.list_complete(
        os.path.join(run, "worker_checkpoints", "worker-1"))}
    assert chief == other == {step}
    # The file the keeper reads: one per task, the same step, within the grace time.
    for task in ("worker-0", "worker-1"):
        with open(os.path.join(run, "tasks", f"{task}.preempted")) as fh:
            record = json.load(fh)
        assert record["step"] == step and record["within_grace"] is True, record
    with open(os.path.join(run, "tasks", "worker-1.preempted")) as fh:
        assert json.load(fh)["signal"] == "SIGTERM"
    assert elapsed < GRACE_S, f"exit took {elapsed:.1f}s"
    print(f"both saved step {step}; signal to both exited: {elapsed:.1f}s")


def test_slurm_warning_signal_saves_too(launcher, tmp_path):
    # sbatch --signal=USR2@<grace>: SIGUSR1 is taken by the stack dump (harness/stackdump.py).
    run, cluster, codes, _ = _preempt_one(launcher, tmp_path, signal.SIGUSR2)
    assert codes == [preempt.EXIT_CODE, preempt.EXIT_CODE], cluster.tails()
    assert _saved_step(cluster, 0) == _saved_step(cluster, 1)
