"""SIGTERM to one worker of an on_failure run (issue 29 item 3): both workers save the same step,
the keeper takes it as a preemption (not a failure) and attempt 2 resumes from exactly that step;
nothing is lost and the run's history says so."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from backend import checkpoints
from backend.runs import launcher
from tests.faults.conftest import (SYNTHETIC, _local, assert_nothing_left, harness_job, kill_task,
                                   metrics, wait_for, wait_phase)

pytestmark = pytest.mark.slow


def test_sigterm_to_one_worker_resumes_from_the_saved_step(local_cluster, store):
    # max_restarts=0: a preemption must not count as a failure, or this run would end failed.
    job = harness_job(max_restarts=0, backoff_s=0.5, steps_per_epoch=2000, checkpoint_every=0,
                      log_every=10, pace_s=0.005)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 30 for r in metrics(run)), 150, "step 30")
    info = json.loads(Path(_local(run.task("worker-1").remote_run_dir), "tasks",
                           "worker-1.json").read_text())
    os.kill(info["pid"], signal.SIGTERM)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished", state
    first, second = state.attempts[0], state.attempts[1]
    assert len(state.attempts) == 2, state.attempts
    assert first.reason.startswith("preempted: saved at step "), first.reason
    saved = int(first.reason.split("saved at step ")[1].split()[0])
    assert first.last_step == saved and second.resume_step == saved, state.attempts
    rows = metrics(run)
    ran = max(r["step"] for r in rows if r["attempt"] == first.number)
    assert ran == saved                                   # not one step run and lost
    assert min(r["step"] for r in rows if r["attempt"] == second.number) == saved + 1
    assert second.last_step == 2000
    assert_nothing_left(run, store)


def _signal_over_ssh(run, name: str, sig: str) -> None:
    """What a cluster does to one task: read its pid on its own host and signal it, both over
    the run's SSH connection (the test hosts are real sshd on 127.0.0.x)."""
    task = run.task(name)
    transport = run.pool.transport(run.cluster.tasks[task.position])
    pid = json.loads(transport.run(["cat", f"{task.remote_run_dir}/tasks/{name}.json"]).stdout)["pid"]
    assert transport.run(["kill", f"-{sig}", str(pid)]).ok


def test_sigterm_over_ssh_every_worker_saves_the_same_step_and_resumes_from_it(
        ssh_cluster, ssh_options, store):
    job = harness_job(max_restarts=0, backoff_s=0.5, steps_per_epoch=2000, checkpoint_every=0,
                      log_every=10, pace_s=0.005)
    run = launcher.launch(ssh_cluster, job, store=store, options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 30 for r in metrics(run)), 150, "step 30")
    _signal_over_ssh(run, "worker-0", "TERM")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished", state
    assert len(state.attempts) == 2, state.attempts
    first, second = state.attempts
    assert first.reason.startswith("preempted: saved at step "), first.reason
    saved = int(first.reason.split("saved at step ")[1].split()[0])
    assert first.last_step == saved and second.resume_step == saved, state.attempts
    # Every worker saved that same step on its own host, and said so in its log.
    for name in ("chief-0", "worker-0"):
        assert f"HARNESS PREEMPTED: saved at step {saved} " in run.log_tail(name, 1_000_000), name
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, name)], name
    rows = metrics(run)
    assert max(r["step"] for r in rows if r["attempt"] == first.number) == saved   # none lost
    assert min(r["step"] for r in rows if r["attempt"] == second.number) == saved + 1
    assert second.last_step == 2000
    assert_nothing_left(run, store)


# The synthetic job with a checkpoint part that takes SAVE_S to write: it stands for a model too
# big for its disk to save within the grace time. tf.train.Checkpoint tracks it through the model.
SAVE_S = 3.0
SLOW_SAVE = f'''

import time as _time


class _SlowSave(tf.train.experimental.PythonState):
    def serialize(self):
        _time.sleep({SAVE_S})
        return "slow"

    def deserialize(self, string_value):
        pass


_build_model = build_model


def build_model():
    model = _build_model()
    model.slow_save = _SlowSave()
    return model
'''


def test_a_save_over_the_grace_time_is_reported_and_the_previous_checkpoint_resumes(
        local_cluster, store, tmp_path):
    module = tmp_path / "slow_save_job.py"
    module.write_text(Path(SYNTHETIC).read_text() + SLOW_SAVE)
    job = harness_job(str(module), max_restarts=1, backoff_s=0.5, steps_per_epoch=200,
                      checkpoint_every=40, log_every=5, pace_s=0.05, preempt_grace_s=1.0)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: [c["step"] for c in checkpoints.list_checkpoints(run)] == [40], 240,
             "checkpoint 40")
    info = json.loads(Path(_local(run.task("worker-1").remote_run_dir), "tasks",
                           "worker-1.json").read_text())
    os.kill(info["pid"], signal.SIGTERM)
    # The cluster's kill comes when the grace is over; the slow save is still being written.
    # Each worker's grace runs from when it learnt of the preemption (worker-0: at the next sync
    # point), so wait for both lines: a kill of worker-0 before its own grace is over is a plain
    # kill, and the attempt's reason may name it first (a loaded full run did).
    wait_for(lambda: all("PREEMPT GRACE EXCEEDED" in run.log_tail(n) for n in ("worker-0", "worker-1")),
             30, "the grace line of both workers")
    for name in ("worker-0", "worker-1"):
        kill_task(run, name)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    first, second = state.attempts[0], state.attempts[1]
    assert "not saved within the grace of 1 s" in first.reason, first.reason   # what the operator reads
    assert not first.reason.startswith("preempted: saved"), first.reason
    assert second.resume_step == 40, state.attempts                  # the previous checkpoint
    assert state.phase == "finished" and len(state.attempts) == 2, state
    rows = metrics(run)
    assert min(r["step"] for r in rows if r["attempt"] == second.number) == 41
    # The half-written save was never listed: each worker's checkpoints are its periodic ones.
    for name in ("worker-0", "worker-1"):
        assert [c["step"] for c in checkpoints.list_checkpoints(run, name)][-1] == 200, name
        assert all(c["step"] % 40 == 0 for c in checkpoints.list_checkpoints(run, name)), name
    assert_nothing_left(run, store)
