"""Monitor warns when a restored attempt did not resume from its step (issue 36): a real run of
two local tasks whose script ignores the resume step, restored, then the page as the user opens it."""
from __future__ import annotations

from backend.runs import restore
from backend.runs.launcher import attach
from backend.runs.store import RunStore
from tests.integration.test_resume_truth import finished_run


def test_monitor_warns_that_a_restored_attempt_started_over(page, runs_dir, local_cluster, python_path, tmp_path):
    run = finished_run(local_cluster, python_path, tmp_path, "ignore")
    assert (tmp_path / "runs") == runs_dir
    result = restore.restore(attach(run.run_id, store=RunStore(runs_dir)), 20)
    assert not result.confirmed
    at = page("monitor")
    assert not at.exception
    shown = [w.value.replace("\\", "") for w in at.warning]
    assert any("attempt 2 is not confirmed as resumed from step 20" in w and "tfconsole.context().resume_step" in w
               for w in shown), shown
