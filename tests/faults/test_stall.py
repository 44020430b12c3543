"""Stall judgement by signs of life (issue 26 item 3), with plain command jobs that write no
metrics: a quiet job that prints, or one that only computes, runs past a short stall timeout
untouched; one that sleeps forever without output or CPU is still caught, named, and restarted."""
from __future__ import annotations

import pytest

from backend.runs import detached, launcher
from tests.faults.conftest import assert_nothing_left, command_job, wait_phase

# Sleeps and prints a line every second for 12 s: no metrics, almost no CPU, a growing log.
QUIET = "import time\nfor i in range(12):\n    print('still here', i, flush=True)\n    time.sleep(1)"
# Computes for 12 s without a word: no metrics, no output, CPU time advancing.
BUSY = "import time\nend = time.time() + 12\nwhile time.time() < end:\n    sum(range(10000))"
# One line, then sleeps forever: no metrics, no output, no CPU.
HUNG = "import time\nprint('started', flush=True)\ntime.sleep(600)"


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
@pytest.mark.parametrize("code", [QUIET, BUSY], ids=["prints", "computes"])
def test_a_quiet_command_job_runs_past_the_stall_timeout(local_cluster, store, python_path, code):
    job = command_job(code, python_path, max_restarts=2, backoff_s=0.2, stall_timeout_s=5)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 90)
    keeper_log = (run.local_dir / detached.KEEPER_LOG).read_text()
    assert state.phase == "finished", keeper_log
    assert len(state.attempts) == 1, [a.reason for a in state.attempts]   # never restarted
    assert "stalled" not in keeper_log
    assert_nothing_left(run, store)


@pytest.mark.slow
@pytest.mark.waits
def test_a_hung_command_job_is_caught_named_and_restarted(local_cluster, store, python_path):
    job = command_job(HUNG, python_path, max_restarts=1, backoff_s=0.2, stall_timeout_s=5)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 90)
    assert state.phase == "failed" and len(state.attempts) == 2, state
    reason = state.attempts[0].reason
    # What the Runs page and `status` show: no sign of life, from which workers, and the stacks.
    assert reason.startswith("stalled: no metrics, log output or CPU time for "), reason
    assert "worker-0, worker-1" in reason and "stacks in stacks/stall-attempt-1/" in reason, reason
    assert (run.local_dir / "stacks" / "stall-attempt-1").is_dir()
    assert_nothing_left(run, store)
