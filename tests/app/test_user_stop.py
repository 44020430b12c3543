"""A stop the user asked for is no error (issue 56 item 9): after `tfconsole stop`, `status` and
the Launch page say each task "stopped (by the user)", not `exited(1) -- The worker stopped
with an error: KeyboardInterrupt` in red; Start's notice ("Open the Monitor page ...") is
Launch's alone and does not sit on top of the Monitor page."""
from __future__ import annotations

import sys

from backend.runs.store import RunStore
from tests.app.conftest import errors, local_rows
from tests.conftest import wait_for
from tests.integration.test_cli import cli

# A Python job that sleeps: INT ends it with a KeyboardInterrupt traceback in its log.
SLEEPER = f"{sys.executable} -c \"import time; print('up', flush=True); time.sleep(600)\""


def _state_column(at) -> list[str]:
    return [str(v) for v in at.dataframe[0].value["state"]]


def test_a_stopped_run_reads_stopped_by_the_user_and_starts_notice_stays_on_launch(page, runs_dir):
    at = page("launch", cluster_rows=local_rows())
    at.radio(key="job_source").set_value("Command").run()
    at.text_input(key="job_command").input(SLEEPER)
    at.button(key="start_button").click().run()
    run_id = at.session_state["run_id"]

    def notice():
        at.run()
        return next((s.value for s in at.success if "started" in s.value), None)
    said = wait_for(notice, 120, "Start's notice on Launch")
    assert said == f"Run {run_id} started. Open the Monitor page to watch its loss."
    wait_for(lambda: RunStore(runs_dir).load(run_id).phase == "running", 60, "the run to run")

    monitor = page("monitor", run_id=run_id, action_run_id=run_id)
    assert not monitor.exception
    assert not any("Open the Monitor page" in s.value for s in monitor.success), \
        [s.value for s in monitor.success]

    cli("stop", run_id, runs=runs_dir)
    status = cli("status", run_id, runs=runs_dir).stdout
    tasks = [line for line in status.splitlines() if line.strip().startswith("worker-")]
    assert len(tasks) == 2 and all(line.rstrip().endswith("stopped (by the user)") for line in tasks), status
    assert "KeyboardInterrupt" not in status and "error" not in status, status

    # The page reads the hosts at most every STATUS_EVERY_S (console/live_run.py), and a read
    # during the stop says "by a stop under way": the next redraws show who stopped it, as an
    # operator's next click does.
    def shown() -> bool:
        at.run()
        assert not at.exception
        return _state_column(at) == ["stopped (by the user)"] * 2
    wait_for(shown, 30, "the page to say the user stopped both tasks")
    assert not errors(at), errors(at)
    assert "KeyboardInterrupt" not in str(at.dataframe[0].value.to_dict())
