"""A toast on the open console when its current run ends or fails (issue 31 item 1)."""
from __future__ import annotations

import re
import sys

from streamlit.testing.v1 import AppTest

from backend.config.spec import cluster_to_dict, default_cluster
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState
from tests.app.conftest import as_owner
from tests.conftest import ROOT


def _saved(run_id: str, phase: Phase) -> RunStore:
    store = RunStore()
    store.reserve(run_id)
    store.save(RunState(run_id, 1000.0, cluster_to_dict(default_cluster(sys.executable)),
                        {"kind": "command", "command": ["true"]},
                        [TaskState("chief-0", 0, "localhost", f"tfconsole/{run_id}")],
                        [Attempt(1, 1000.0)], phase=phase))
    return store


def _app(run_id: str) -> AppTest:
    at = as_owner(AppTest.from_file(str(ROOT / "console" / "app.py"), default_timeout=60))
    at.session_state["run_id"] = at.session_state["chosen_run_id"] = run_id
    return at


def test_the_open_console_toasts_when_its_run_fails(runs_dir):
    store = _saved("r1", Phase.STOPPING)   # live, and nothing on any host for the page to read
    at = _app("r1").run()
    assert not at.exception and not at.toast
    store.move("r1", Phase.FAILED, when=(Phase.STOPPING,), reason="worker-1 exited(3): [boom](http://x)")
    at.run()
    # shown as text: the task's Markdown escaped, no link
    assert [re.sub(r"\\(.)", r"\1", t.value) for t in at.toast] == ["Run r1 failed: worker-1 exited(3): [boom](http://x)"]
    assert r"\[boom\]" in at.toast[0].value
    at.run()
    assert not at.toast   # once


def test_a_run_first_seen_ended_toasts_nothing(runs_dir):
    _saved("r2", Phase.FINISHED)
    at = _app("r2").run()
    at.run()
    assert not at.exception and not at.toast
