"""The console's registry of runs stays bounded however many runs a long-lived console shows,
and a restarted watch stops the log copier it replaces."""
from __future__ import annotations

import sys

import pytest

from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState
from backend.config.spec import cluster_to_dict, default_cluster
from console.live_run import Registry


def _saved_run(store: RunStore, run_id: str) -> None:
    """A finished run's record only: enough to attach it."""
    store.reserve(run_id)
    store.save(RunState(run_id, 1000.0, cluster_to_dict(default_cluster(sys.executable)),
                        {"kind": "command", "command": ["true"]},
                        [TaskState("chief-0", 0, "localhost", f"tfconsole/{run_id}")],
                        [Attempt(1, 1000.0)], phase=Phase.FINISHED))


@pytest.fixture
def registry(tmp_path):
    reg = Registry(RunStore(tmp_path / "runs"), keep_runs=3, in_use_s=0)
    yield reg
    reg.close()


def test_viewing_many_runs_keeps_only_the_recent_ones_and_closes_the_rest(registry):
    ids = [f"run-{i}" for i in range(8)]
    for run_id in ids:
        _saved_run(registry.store, run_id)
    first = registry.get(ids[0])
    first.run.transport("chief-0")                       # a connection, as a page's status check opens
    assert first.run.pool._open
    for run_id in ids[1:]:
        registry.get(run_id)
    assert registry.held() == ids[:-4:-1]               # the three shown last, newest first
    assert not first.run.pool._open                      # the first run's connections were closed
    again = registry.get(ids[0])                         # shown again: attached anew, still works
    assert again is not first and again.run_id == ids[0]
    assert len(registry.held()) == 3


def test_a_run_shown_recently_or_acting_is_not_let_go(tmp_path):
    reg = Registry(RunStore(tmp_path / "runs"), keep_runs=1)   # default in_use_s: all were just shown
    try:
        for i in range(3):
            _saved_run(reg.store, f"run-{i}")
            reg.get(f"run-{i}")
        assert sorted(reg.held()) == ["run-0", "run-1", "run-2"]
    finally:
        reg.close()


def test_a_restarted_watch_stops_the_log_copier_it_replaces(tmp_path):
    """A live run's watch stopped (the agent's connection lost) and started again: the old log
    copier's thread and SSH pool must end, not pile up one per restart."""
    from backend.runs.launcher import Preflight, launch
    from backend.config.spec import job_from_dict
    from console.forms import check_rows
    from tests.app.conftest import local_rows
    reg = Registry(RunStore(tmp_path / "runs"))
    cluster, _ = check_rows(local_rows())
    run = launch(cluster, job_from_dict({"kind": "command", "command": [sys.executable, "-c",
                                                                         "import time; time.sleep(60)"]}),
                 store=reg.store, preflight=Preflight.SKIP)
    try:
        live = reg.put(run)
        live.ensure_monitor()
        old = live.copier
        assert old is not None
        live.monitor.stop()
        live.ensure_monitor()                            # as the next page rerun does
        assert live.copier is not old
        assert old._stop.is_set()
    finally:
        reg.close()
        run.stop(grace_s=3)
