"""The restart policy on Slurm: a task killed with SIGKILL ends its job, and the keeper submits a
new job that resumes from the newest checkpoint, counted against max_restarts."""
from __future__ import annotations

import pytest

from backend.runs import launcher
from backend.engines.slurm import SlurmEngine
from backend.runs.store import RunStore
from tests.faults.conftest import PARAMS, assert_nothing_left, harness_job, kill_task, metrics, wait_phase
from tests.conftest import slurm_spec, wait_for

pytestmark = pytest.mark.slow
TOTAL = PARAMS["epochs"] * PARAMS["steps_per_epoch"]


def test_a_task_killed_with_sigkill_is_resubmitted_from_the_newest_checkpoint(slurm_cluster, tmp_path, python_path):
    store = RunStore(tmp_path / "runs")
    cluster = slurm_spec(tmp_path, python_path)
    run = launcher.launch(cluster, harness_job(max_restarts=2), store=store)
    wait_for(lambda: any(r["step"] > PARAMS["checkpoint_every"] for r in metrics(run)), 300,
             "training past the first checkpoint")
    kill_task(run, "worker-0")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 400)
    assert state.phase == "finished", (state, run.log_tail("worker-0"))
    first, second = state.attempts
    assert "worker-0" in first.reason, first   # the killed task, not its casualty
    rows = metrics(run)
    died_at = max(r["step"] for r in rows if r["attempt"] == first.number)
    assert second.resume_step and 0 <= died_at - second.resume_step <= PARAMS["checkpoint_every"], \
        (died_at, second.resume_step)
    assert min(r["step"] for r in rows if r["attempt"] == second.number) > second.resume_step
    assert second.last_step == TOTAL
    jobs = SlurmEngine.jobs(run)
    assert sorted(jobs) == ["1", "2"] and jobs["1"] != jobs["2"], jobs   # a new Slurm job
    assert_nothing_left(run, store)
