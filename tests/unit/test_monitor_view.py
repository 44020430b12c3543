"""Monitor's stall warning: what it says matches what the run's restart policy will do."""
from __future__ import annotations

from types import SimpleNamespace

from backend.watch.metrics import MetricsStore
from backend.config.spec import RestartMode, RestartPolicy
from console import monitor_view


def _live(mode: RestartMode, stall_timeout_s: float):
    """A live run whose two workers last reported step 7 at t=100 (the warning reads no more)."""
    store = MetricsStore()
    store.add_many([{"task": f"worker-{w}", "attempt": 1, "step": s, "time": 90.0 + s, "loss": 1.0}
                    for s in (5, 6, 7) for w in (0, 1)])
    restart = RestartPolicy(mode=mode, stall_timeout_s=stall_timeout_s)
    return SimpleNamespace(run=SimpleNamespace(state=SimpleNamespace(live=True),
                                               job=SimpleNamespace(restart=restart)), metrics=store)


def test_a_kept_run_counts_down_to_the_stall_timeout():
    live = _live(RestartMode.ON_FAILURE, 300)
    assert monitor_view.stall_warning(live, now=130.0) == ""          # 33 s: not yet news
    note = monitor_view.stall_warning(live, now=197.0)
    assert "worker-0, worker-1 stopped at step 7" in note
    assert "the stall timeout acts in 200 s" in note


def test_stall_timeout_zero_is_off_not_due():
    live = _live(RestartMode.ON_FAILURE, 0)
    assert monitor_view.stall_warning(live, now=130.0) == ""          # off: no warning at 0 s idle
    note = monitor_view.stall_warning(live, now=197.0)
    assert "stopped at step 7" in note
    assert "due" not in note and "acts in" not in note
    assert "the stall timeout is off (stall_timeout_s: 0): nothing will stop it" in note
    assert "Press Dump stacks" in note


def test_restart_never_announces_no_timeout():
    """No keeper watches a ``restart: never`` run, so no stall timeout acts on it."""
    note = monitor_view.stall_warning(_live(RestartMode.NEVER, 300), now=500.0)
    assert "stopped at step 7" in note
    assert "due" not in note and "acts in" not in note
    assert "restart: never, so no stall timeout acts: nothing will stop it" in note
