"""Preemption on Slurm (issue 29): the signal Slurm sends ahead of a time limit (the batch script's
``--signal=USR2@<preempt_grace_s>``) makes every task save the step it is at and exit 75; the
keeper submits a new job that resumes from that step, losing nothing, and counts it as a
preemption, not a restart. Slurm's own lead is only accurate to a minute, so the test sends the
same signal the way Slurm does (to every task of the job's steps) with ``scancel --signal=USR2``."""
from __future__ import annotations

import pytest

from backend.engines.slurm import SlurmEngine
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import slurm_spec, wait_for
from tests.faults.conftest import PARAMS, assert_nothing_left, harness_job, metrics, wait_phase

from tests.slurm_cluster.conftest import resumed_where_it_stopped, training_past_a_checkpoint

pytestmark = pytest.mark.slow


def test_the_time_limit_signal_saves_the_current_step_and_the_next_job_resumes_from_it(
        slurm_cluster, tmp_path, python_path):
    store, run, first_job = training_past_a_checkpoint(tmp_path, python_path)
    slurm_cluster.run("scancel", "--signal=USR2", first_job)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 400)
    assert state.phase == "finished", (state, run.log_tail("chief-0"))
    first, second, ran_to = resumed_where_it_stopped(run, state)
    assert first.reason.startswith(f"preempted: saved at step {ran_to}"), first
    jobs = SlurmEngine.jobs(run)
    assert sorted(jobs) == ["1", "2"] and jobs["2"] != first_job, jobs   # a new Slurm job
    assert_nothing_left(run, store)


def test_a_real_time_limit_signals_ahead_and_the_next_job_resumes_from_the_last_step_ran(
        slurm_cluster, tmp_path, python_path):
    """No scancel: Slurm itself sends USR2 ``preempt_grace_s`` ahead of the time limit. Slurm
    sends it up to a minute early (its event resolution), so a 1-minute limit with a 25 s lead
    could signal at once, before a loaded machine's tasks have even imported TensorFlow (the
    signal is then ignored, by design, and the limit's TERM kills tasks still starting). Here a
    2-minute limit and a 10 s lead (the synthetic job saves in under a second): the signal comes
    50-110 s after the job starts. Costs about 2.5-3.5 min; the run is stopped once it resumed."""
    store = RunStore(tmp_path / "runs")
    cluster = slurm_spec(tmp_path, python_path, time_limit="2")
    # No periodic checkpoint: the step resumed from can only be the one saved on the signal.
    job = harness_job(max_restarts=0, steps_per_epoch=100000, checkpoint_every=0, log_every=10,
                      pace_s=0.03, preempt_grace_s=10)
    run = launcher.launch(cluster, job, store=store)

    def resumed():
        state = store.load(run.run_id)
        if not state.live:   # say why at once, not after the whole wait
            raise AssertionError(f"the run ended: {state.phase} {state.attempts} "
                                 f"{run.log_tail('chief-0')}")
        return len(state.attempts) >= 2 and state.phase == "running" and state

    state = wait_for(resumed, 300, "a second Slurm job after the time limit's signal")
    first, second = state.attempts[:2]
    assert first.reason.startswith("preempted: saved at step ") and "(SIGUSR2" in first.reason, first
    wait_for(lambda: any(r["attempt"] == second.number for r in metrics(run)), 120,
             "the second job's first metrics row")
    rows = metrics(run)
    ran_to = max(r["step"] for r in rows if r["attempt"] == first.number)
    assert first.reason.startswith(f"preempted: saved at step {ran_to} "), (first, ran_to)
    assert second.resume_step == ran_to, (second, ran_to)      # the last step it ran: nothing lost
    assert min(r["step"] for r in rows if r["attempt"] == second.number) == ran_to + 1
    jobs = SlurmEngine.jobs(run)
    assert jobs["2"] != jobs["1"], jobs                          # a new Slurm job
    run.stop(grace_s=5)
    assert_nothing_left(run, store)


def test_a_run_with_no_restart_policy_stopped_by_its_time_limit_says_so_and_how_to_go_on(
        slurm_cluster, tmp_path, python_path):
    """Issue 35: the time limit's signal (sent as Slurm sends it, ``scancel --signal=USR2``) ends
    a run that nothing restarts ``stopped`` at the saved step. Its reason said only "preempted:
    saved at step N (SIGUSR2 ...)": it must name the time limit, and how to continue."""
    from backend.config.spec import job_from_dict
    from tests.faults.conftest import SYNTHETIC, TF_ENV
    store = RunStore(tmp_path / "runs")
    cluster = slurm_spec(tmp_path, python_path)
    job = job_from_dict({"kind": "harness", "module": SYNTHETIC, "env": TF_ENV,
                         "params": {**PARAMS, "steps_per_epoch": 100000, "checkpoint_every": 0}})
    run = launcher.launch(cluster, job, store=store)
    wait_for(lambda: any(r["step"] >= 20 for r in metrics(run)), 300, "training to step 20")
    slurm_cluster.run("scancel", "--signal=USR2", SlurmEngine.jobs(run)["1"])
    wait_for(lambda: run.settle() is not None and not run.state.live, 300, "the run to end")
    attempt = run.state.attempts[-1]
    ran_to = max(r["step"] for r in metrics(run))
    assert run.state.phase == "stopped" and attempt.last_step == ran_to, run.state
    assert attempt.reason.startswith(f"preempted: saved at step {ran_to} (SIGUSR2, "), attempt.reason
    assert "the Slurm job reached its time limit (00:10:00)" in attempt.reason, attempt.reason
    assert f"to go on: Restore from step {ran_to} (and raise time_limit in the cluster file" in attempt.reason
    assert_nothing_left(run, store)
