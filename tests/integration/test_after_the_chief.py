"""A finished run ends in bounded time: once the chief has exited 0 (its steps and last save are
done), a peer that runs on is only shutting down, as a TensorFlow worker retrying heartbeats to
the chief's closed port did for 77 s. It is stopped ``CHIEF_DONE_GRACE_S`` after the chief's exit
(on the chief's host clock), the run is recorded finished, every reader says so, and nothing is
left on the hosts. Small Python scripts stand in for the workers (no TensorFlow): the peer here
sleeps as the real one retried, which is what the console sees of it."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend.config.spec import job_from_dict
from backend.records.outcome import AFTER_THE_CHIEF, CHIEF_DONE_GRACE_S
from backend.records.state import Phase
from backend.runs import launcher
from backend.runs.store import RunStore
from tests.conftest import processes_of

# The chief writes its steps and exits 0; every other task "shuts down" for 10 minutes.
SCRIPT = """\
import json, os, time
if os.environ["TFCONSOLE_IS_CHIEF"] == "1":
    with open(os.path.join(os.environ["TFCONSOLE_RUN_DIR"], "metrics.jsonl"), "a") as f:
        for step in range(1, 6):
            f.write(json.dumps({"attempt": int(os.environ["TFCONSOLE_ATTEMPT"]),
                                "task": os.environ["TFCONSOLE_TASK"], "step": step, "loss": 1.0}) + "\\n")
else:
    time.sleep(600)
"""


def _job(tmp_path: Path, python: str, **extra):
    script = tmp_path / "after_chief.py"
    script.write_text(SCRIPT)
    return job_from_dict({"kind": "command", "command": [python, str(script)], **extra})


@pytest.mark.parametrize("kept", [False, True], ids=["settled by a reader", "kept by the keeper"])
def test_a_peer_running_on_after_the_chief_finished_is_stopped_and_the_run_finished(
        any_cluster, python_path, tmp_path, kept):
    cluster, launch_kw = any_cluster
    store = RunStore(tmp_path / "runs")
    extra = {"restart": {"mode": "on_failure", "max_restarts": 1}} if kept else {}
    began = time.monotonic()
    run = launcher.launch(cluster, _job(tmp_path, python_path, **extra), store=store, **launch_kw)
    # Without the bound the peer's 600 s sleep would hold the run `running` past this wait.
    run.wait(timeout=CHIEF_DONE_GRACE_S + 120)
    took = time.monotonic() - began
    assert run.state.phase == Phase.FINISHED, (run.state.phase, run.state.attempts[-1].reason)
    assert took < 300, took
    last = run.state.attempts[-1]
    assert last.reason.startswith(AFTER_THE_CHIEF), last.reason
    assert "still shutting down" in last.reason and "stopped" in last.reason, last.reason
    assert last.last_step == 5
    chief = run.state.chief.name
    run.reload()
    labels = {s.name: s.label for s in run.status()}
    assert labels.pop(chief) == "exited(0)", labels
    assert set(labels.values()) == {"stopped (after the chief finished)"}, labels
    assert len(run.state.attempts) == 1   # no restart: nothing failed
    assert processes_of(run) == []
