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


# The chief's agent beat at 100 on its clock, received at 100 on ours: one clock.
SAME_CLOCK = {"chief_clock": (100.0, 100.0)}
HOUR = 3600.0


def test_a_kept_run_counts_down_to_the_stall_timeout():
    live = _live(RestartMode.ON_FAILURE, 300)
    assert monitor_view.stall_warning(live, SAME_CLOCK, now=130.0) == ""          # 33 s: not yet news
    note = monitor_view.stall_warning(live, SAME_CLOCK, now=197.0)
    assert "worker-0, worker-1 stopped at step 7" in note
    assert "the stall timeout acts in 200 s" in note


def test_stall_timeout_zero_is_off_not_due():
    live = _live(RestartMode.ON_FAILURE, 0)
    assert monitor_view.stall_warning(live, SAME_CLOCK, now=130.0) == ""          # off: no warning at 0 s idle
    note = monitor_view.stall_warning(live, SAME_CLOCK, now=197.0)
    assert "stopped at step 7" in note
    assert "due" not in note and "acts in" not in note
    assert "the stall timeout is off (stall_timeout_s: 0): nothing will stop it" in note
    assert "Press Dump stacks" in note


def test_restart_never_announces_no_timeout():
    """No keeper watches a ``restart: never`` run, so no stall timeout acts on it."""
    note = monitor_view.stall_warning(_live(RestartMode.NEVER, 300), SAME_CLOCK, now=500.0)
    assert "stopped at step 7" in note
    assert "due" not in note and "acts in" not in note
    assert "restart: never, so no stall timeout acts: nothing will stop it" in note


def test_no_step_since_is_told_on_the_chief_clock_whatever_the_console_clock_says():
    """Issue 47: a console 2 h ahead said "No step since 7200 s" of a healthy run; one 2 h behind
    would not warn of a real hang for 2 h. The metrics' times are the chief's: idle is measured
    on the chief's clock (its heartbeat's time, plus our time since that heartbeat came)."""
    live = _live(RestartMode.ON_FAILURE, 300)   # last step at 97 on the chief's clock
    ahead = {"chief_clock": (98.0, 98.0 + 2 * HOUR)}   # a heartbeat a second after that step
    assert monitor_view.chief_now(ahead, now=100.0 + 2 * HOUR) == 100.0
    assert monitor_view.stall_warning(live, ahead, now=100.0 + 2 * HOUR) == ""   # 3 s: healthy
    behind = {"chief_clock": (98.0, 98.0 - 2 * HOUR)}
    note = monitor_view.stall_warning(live, behind, now=197.0 - 2 * HOUR)   # 100 s with no step
    assert note.startswith("No step since 100 s: worker-0, worker-1 stopped at step 7"), note
    never = _live(RestartMode.NEVER, 300)
    assert monitor_view.stall_warning(never, ahead, now=100.0 + 2 * HOUR) == ""
    assert "No step since 100 s" in monitor_view.stall_warning(never, behind, now=197.0 - 2 * HOUR)
    # Before the chief's first heartbeat its clock is unknown: nothing is said.
    assert monitor_view.chief_now({}, now=500.0) is None
    assert monitor_view.stall_warning(live, {}, now=500.0) == ""


def _starting(attempt_started: list[float], *, live: bool = True, rows: int = 0):
    """A run with attempts begun at ``attempt_started`` and ``rows`` metrics rows so far."""
    store = MetricsStore()
    store.add_many([{"task": "worker-0", "attempt": 1, "step": s, "time": 100.0 + s, "loss": 1.0}
                    for s in range(1, rows + 1)])
    attempts = [SimpleNamespace(started=t) for t in attempt_started]
    return SimpleNamespace(run=SimpleNamespace(state=SimpleNamespace(live=live, attempts=attempts)),
                           metrics=store)


def test_monitor_opened_during_starts_preflight_looks_often_for_the_first_points():
    """Monitor opened right after Start finds the run in preflight, before its first attempt is
    recorded: it must look every 0.5 s then too (it looked every 2 s, and the page said the
    run's first step 1.5-2.1 s after the console held it, bench/first_curves.py)."""
    assert monitor_view.waiting_for_first_points(_starting([]), now=100.0)
    assert monitor_view.waiting_for_first_points(_starting([100.0]), now=150.0)


def test_the_quick_look_ends_with_the_first_points_an_old_attempt_or_the_run():
    assert not monitor_view.waiting_for_first_points(_starting([100.0], rows=1), now=101.0)
    assert not monitor_view.waiting_for_first_points(_starting([100.0]), now=100.0 + 121)   # writes none
    assert not monitor_view.waiting_for_first_points(_starting([100.0], live=False), now=101.0)
