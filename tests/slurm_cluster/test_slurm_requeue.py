"""The cluster's own requeue (issue 29 item 2): an administrator's ``scontrol requeue``, a
preemption under ``PreemptMode=REQUEUE`` or a node failure puts the SAME Slurm job back in the
queue, and Slurm runs its batch script again. The console follows that job id: the run shows
queued, then running, the history has the requeue as a new attempt, the re-run resumes from the
step the requeue's SIGTERM saved (the newest checkpoint every task holds), and the keeper
submits no second job."""
from __future__ import annotations

import time

import pytest

from backend.engines.slurm import SlurmEngine
from backend.runs import launcher
from tests.conftest import wait_for
from tests.faults.conftest import assert_nothing_left, expected_steps, metrics, \
    steps_seen, wait_phase

from tests.slurm_cluster.conftest import resumed_where_it_stopped, training_past_a_checkpoint

pytestmark = pytest.mark.slow


def test_an_administrators_requeue_is_followed_on_the_same_job_and_resumes_from_the_saved_step(
        slurm_cluster, tmp_path, python_path):
    store, run, job_id = training_past_a_checkpoint(tmp_path, python_path)
    slurm_cluster.run("scontrol", "requeue", job_id)   # as the cluster's administrator (root)

    def phase_is(phase: str):
        def seen():
            handle = launcher.attach(run.run_id, store=store)
            handle.status()   # what status, the pages and the keeper read
            return handle.state.phase == phase and handle.state
        return seen

    state = wait_for(phase_is("queued"), 90, "the run queued again after the requeue")
    assert len(state.attempts) == 2, state.attempts          # the requeue is a new attempt
    first = state.attempts[0]
    assert first.reason.startswith(f"requeued by Slurm: job {job_id} "), first
    seen_queued = time.time()
    # Slurm holds a requeued job for its credential lifetime (121 s by default); let it go now.
    slurm_cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
    released = time.time()
    state = wait_for(phase_is("running"), 60, "the requeued job running again")
    assert len(state.attempts) == 2 and SlurmEngine.jobs(run)["2"] == job_id, SlurmEngine.jobs(run)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 400)
    assert state.phase == "finished", (state, run.log_tail("chief-0"))
    assert len(state.attempts) == 2, state.attempts
    first, second, ran_to = resumed_where_it_stopped(run, state)
    # The requeue's SIGTERM saved the step each worker was at: nothing lost.
    print(f"attempt 1: {first}\nattempt 2: {second}")
    assert f"saved at step {ran_to}" in first.reason, (first, ran_to)
    assert first.last_step == ran_to, (first, second)
    rows = metrics(run)
    for task in [t.name for t in state.tasks]:
        assert steps_seen(rows, task) == expected_steps([0, ran_to]), task
    # The same job id throughout, and no other job: the keeper submitted nothing.
    assert set(SlurmEngine.jobs(run).values()) == {job_id}, SlurmEngine.jobs(run)
    ids = slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
    assert ids.count(job_id) == 1 and not [i for i in ids if int(i) > int(job_id)], ids
    # Goodput (docs/goodput.md): the hold is "queued", from the attempt's start to when a reader
    # saw its tasks started, at least as long as the test itself held the job.
    from backend import api
    found = api.attach(run.run_id, runs=store.root).goodput()
    assert second.dequeued is not None and second.dequeued - second.started >= released - seen_queued, second
    want = sum((a.dequeued - a.started) * len(state.tasks) for a in state.attempts if a.dequeued)
    assert found["causes"]["queued"] == pytest.approx(want, rel=1e-6), (found, state.attempts)
    assert sum(found["causes"].values()) == pytest.approx(found["total_s"], rel=1e-6)
    assert_nothing_left(run, store)
