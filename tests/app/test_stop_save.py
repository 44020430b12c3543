"""Save, then stop from the console (issue 29 item 3): on a live paced harness run the Stop
confirm offers "Save, then stop"; the run ends stopped, the message names the step every worker
saved, and the Checkpoints page lists that step newest and offers it first for Restore."""
from __future__ import annotations

import re

import pytest

from backend import checkpoints
from backend.runs.store import RunStore
from tests.app.conftest import errors, local_rows
from tests.app.test_action_button import _delivered_twice
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.slow


def _paced_run(root):
    """Two local workers training slowly (still running when we stop), a periodic checkpoint
    every 20 steps: the save-then-stop step must be newer than those."""
    from backend.config.spec import job_from_dict
    from backend.runs.launcher import Preflight, launch
    from console.forms import check_rows
    cluster, _ = check_rows(local_rows())
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 1, "steps_per_epoch": 100000, "log_every": 10,
                                    "checkpoint_every": 20, "pace_s": 0.005},
                         "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1"}})
    return launch(cluster, job, store=RunStore(root), preflight=Preflight.SKIP)


def test_save_then_stop_names_the_step_and_restore_offers_it_first(page, runs_dir, monkeypatch):
    run = _paced_run(runs_dir)
    wait_for(lambda: any(c["step"] >= 20 for c in checkpoints.list_checkpoints(run)), 180,
             "a periodic checkpoint")
    at = page("monitor", run_id=run.run_id)
    at.button(key="monitor_stop").click().run()
    assert any("Save, then stop" in w.value for w in at.warning)   # the confirm explains both
    with monkeypatch.context() as busy:   # the click delivered twice, as on a busy machine (issue 35)
        _delivered_twice(busy)
        at.button(key="monitor_save").click().run()
    assert not at.exception
    assert not errors(at), errors(at)

    def said():
        at.run()
        return next((s.value for s in at.success if "saved step" in s.value), None)
    text = wait_for(said, 120, "the background save-then-stop to report")
    found = re.search(r"saved step (\d+) on every worker: Restore offers it first", text)
    assert found, text
    step = int(found.group(1))
    state = RunStore(runs_dir).load(run.run_id)
    assert state.phase == "stopped" and f"saved at step {step}" in state.attempts[-1].reason
    chief = [c["step"] for c in checkpoints.list_checkpoints(run)]
    assert max(chief) == step and step > 20   # the newest: past the periodic ones
    assert step in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-1")]

    ck = page("checkpoints", run_id=run.run_id)
    assert not ck.exception
    assert ck.selectbox(key="restore_step").options[0] == str(step)   # Restore offers it first
