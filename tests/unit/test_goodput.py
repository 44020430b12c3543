"""Goodput accounting as tables (backend/records/goodput.py): runs built here with known
answers; the causes always add up to the run's task-seconds."""
from __future__ import annotations

import pytest

from backend.records import goodput as g
from backend.records.state import Attempt, RunState, TaskState


def _run(attempts: list[Attempt], tasks: int = 2, created: float = 0.0) -> RunState:
    return RunState(run_id="r", created=created, cluster={}, job={},
                    tasks=[TaskState(f"worker-{i}", i, "h", "runs/r") for i in range(tasks)], attempts=attempts)


def _points(attempt: int, steps: range, t0: float, step_s: float) -> list[g.Point]:
    return [g.Point(attempt, s, t0 + (s - steps.start) * step_s) for s in steps]


def test_one_clean_attempt_is_launch_start_up_training_and_its_end():
    # Start at 0, attempt at 2 (launch 2 s), first sync point at 8 (start-up 6 s), steps 1..101
    # one second apart (100 s of training), the attempt ends 4 s after its last line.
    state = _run([Attempt(1, started=2.0, ended=112.0, last_step=101)])
    found = g.account(state, _points(1, range(1, 102), 8.0, 1.0), now=999.0)
    assert found.total_s == pytest.approx(112 * 2)
    assert found.causes[g.LAUNCH] == pytest.approx(4)
    assert found.causes[g.STARTUP] == pytest.approx(12)
    assert found.causes[g.TRAINING] == pytest.approx(200)
    assert found.causes[g.END] == pytest.approx(8)
    assert found.causes[g.LOST] == found.causes[g.RESTART] == found.causes[g.UNACCOUNTED] == 0
    assert found.share == pytest.approx(200 / 224)


def test_a_restart_from_an_older_checkpoint_costs_the_steps_it_threw_away():
    # Attempt 1 trains steps 1..77 (1 s a step) and dies; checkpoints every 20: attempt 2
    # resumes from step 60 after a 5 s restart and trains 61..100.
    state = _run([Attempt(1, started=0.0, ended=90.0, last_step=77, reason="worker-1 exited(1)"),
                  Attempt(2, started=95.0, ended=150.0, resume_step=60, last_step=100)])
    points = _points(1, range(1, 78), 5.0, 1.0) + _points(2, range(61, 101), 105.0, 1.0)
    found = g.account(state, points, now=999.0)
    assert found.causes[g.LOST] == pytest.approx(17 * 2)          # steps 61..77, twice
    assert found.causes[g.RESTART] == pytest.approx(5 * 2)
    assert found.causes[g.TRAINING] == pytest.approx((76 - 17 + 39) * 2)
    assert sum(found.causes.values()) == pytest.approx(found.total_s) == pytest.approx(150 * 2)
    assert found.attempts[1].text == ("attempt 2 lost 17 steps (17 s x 2 tasks): it resumed from step 60, "
                                      "attempt 1 had reached 77")
    assert found.attempts[0].text == ""


@pytest.mark.parametrize("case, attempts, points", [
    ("a live run, its attempt ends now", [Attempt(1, started=1.0)], _points(1, range(1, 50), 4.0, 0.5)),
    ("a command job that reports nothing", [Attempt(1, started=1.0, ended=30.0)], []),
    ("a chief clock 40 s ahead of the console's", [Attempt(1, started=1.0, ended=60.0)],
     _points(1, range(1, 40), 44.0, 1.0)),
    ("a chief clock 40 s behind", [Attempt(1, started=1.0, ended=60.0)], _points(1, range(1, 40), -36.0, 1.0)),
    ("three attempts, one resumed from nothing",
     [Attempt(1, 0.0, ended=20.0), Attempt(2, 22.0, ended=40.0, resume_step=None),
      Attempt(3, 41.0, ended=80.0, resume_step=10)],
     _points(1, range(1, 15), 3.0, 1.0) + _points(2, range(1, 12), 25.0, 1.0) + _points(3, range(11, 40), 43.0, 1.0)),
])
def test_the_causes_add_up_to_the_whole(case, attempts, points):
    found = g.account(_run(attempts), points, now=70.0)
    assert all(v >= 0 for v in found.causes.values()), found.causes
    assert sum(found.causes.values()) == pytest.approx(found.total_s)
    assert set(found.causes) == set(g.CAUSES)


def test_a_skewed_chief_clock_moves_seconds_between_start_up_and_end_never_into_goodput():
    attempt = [Attempt(1, started=1.0, ended=60.0)]
    right = g.account(_run(attempt), _points(1, range(1, 40), 5.0, 1.0), now=0)
    ahead = g.account(_run(attempt), _points(1, range(1, 40), 45.0, 1.0), now=0)
    assert ahead.causes[g.TRAINING] == right.causes[g.TRAINING] == pytest.approx(38 * 2)
    assert ahead.causes[g.STARTUP] + ahead.causes[g.END] == pytest.approx(right.causes[g.STARTUP] + right.causes[g.END])


def test_nothing_reported_says_goodput_is_not_known():
    found = g.account(_run([Attempt(1, started=1.0, ended=30.0)]), [], now=0)
    assert found.share is None and found.causes[g.UNREPORTED] == pytest.approx(58)
    assert "not known" in g.summary(found)


def test_sync_points_come_from_the_chiefs_lines_one_per_step():
    from backend.client.harness import metric_line
    lines = [metric_line.parse({"task": t, "attempt": 1, "step": s, "time": 10.0 + s + (0.01 if t == "worker-1" else 0)})
             for s in (1, 2) for t in ("worker-0", "worker-1")] + [metric_line.parse({"task": "worker-0", "step": 3})]
    assert sorted(g.points_from_lines(lines), key=lambda p: p.step) == [g.Point(1, 1, 11.0), g.Point(1, 2, 12.0)]


def test_saves_and_validation_inside_the_window_are_their_own_causes():
    # Steps 1..101, a line every 10 steps, 1 s a step; the chief also stood still 3 s saving
    # before each line from step 21 on (said on the line after the save), and 5 s validating at
    # step 51: those seconds are not training kept, and the first line's are before the window.
    lines, t = [], 8.0
    for step in range(1, 102, 10):
        save = 3.0 if step >= 21 else 0.0
        val = 5.0 if step == 51 else 0.0
        t += (10.0 + save + val) if step > 1 else 0.0
        lines.append(g.Point(1, step, t, save_s=save if step > 1 else 9.0, val_s=val))
    state = _run([Attempt(1, started=2.0, ended=t + 4.0, last_step=101)])
    found = g.account(state, lines, now=999.0)
    assert found.causes[g.SAVES] == pytest.approx(9 * 3.0 * 2)        # lines 21..101
    assert found.causes[g.VALIDATION] == pytest.approx(5.0 * 2)
    assert found.causes[g.TRAINING] == pytest.approx(100 * 2)         # the steps themselves
    assert sum(found.causes.values()) == pytest.approx(found.total_s)


def test_a_restart_counts_lost_steps_at_their_own_pace_not_the_saves():
    # 1 s a step plus a 10 s save before the line at step 40; attempt 2 resumes from step 40:
    # the 10 lost steps (41..50) cost 10 s a task, the save stays a save.
    points = [g.Point(1, 1, 10.0), g.Point(1, 40, 59.0, save_s=10.0), g.Point(1, 50, 69.0)]
    state = _run([Attempt(1, started=0.0, ended=70.0, last_step=50, reason="worker-1 exited(1)"),
                  Attempt(2, started=75.0, ended=80.0, resume_step=40, last_step=40)])
    found = g.account(state, points, now=999.0)
    assert found.causes[g.SAVES] == pytest.approx(20.0)
    assert found.causes[g.LOST] == pytest.approx(20.0)
    assert found.causes[g.TRAINING] == pytest.approx((59.0 - 10.0 - 10.0) * 2)


def test_the_line_says_what_blocked_and_the_parser_keeps_only_sense():
    from backend.client.harness import metric_line
    line = metric_line.parse({"task": "worker-0", "step": 5, "time": 1.0,
                              "blocked": {"save": 1.5, "validation": -2, "other": 3, }})
    assert line.blocked == {"save": 1.5}                 # a negative or unknown kind is left out
    assert metric_line.parse({"task": "w", "step": 1, "blocked": "x"}).blocked == {}
    assert g.points_from_lines([line]) == [g.Point(0, 5, 1.0, save_s=1.5)]


def test_input_wait_is_its_own_cause_inside_the_kept_steps():
    # A line every 10 steps, 10 s apart, 1 s a step; the slowest worker waited for its next
    # batch a quarter of each interval: 25 of the 100 s of steps, for each of the 2 tasks.
    points = [g.Point(1, step, 8.0 + (step - 1), input_share=0.25 if step > 1 else 0.9)
              for step in range(1, 102, 10)]
    state = _run([Attempt(1, started=2.0, ended=112.0, last_step=101)])
    found = g.account(state, points, now=999.0)
    assert found.causes[g.INPUT] == pytest.approx(25 * 2)      # the first line's share lies before the window
    assert found.causes[g.TRAINING] == pytest.approx(75 * 2)
    assert sum(found.causes.values()) == pytest.approx(found.total_s)


def test_steps_lost_take_their_input_wait_with_them():
    # Half of every interval waited; steps 51..100 are thrown away by a resume from step 50.
    points = [g.Point(1, step, float(step), input_share=0.5) for step in range(0, 101, 10)]
    state = _run([Attempt(1, started=0.0, ended=100.0, last_step=100, reason="worker-1 exited(1)"),
                  Attempt(2, started=100.0, ended=100.0, resume_step=50, last_step=50)])
    found = g.account(state, points, now=999.0)
    assert found.causes[g.LOST] == pytest.approx(50 * 2)
    assert found.causes[g.INPUT] == pytest.approx(25 * 2) == pytest.approx(found.causes[g.TRAINING])


def test_a_sync_points_input_wait_is_its_slowest_workers():
    from backend.client.harness import metric_line
    lines = [metric_line.parse({"task": "worker-0", "attempt": 1, "step": 10, "time": 5.0, "input_wait": 0.1}),
             metric_line.parse({"task": "worker-1", "attempt": 1, "step": 10, "time": 5.0, "input_wait": 0.7}),
             metric_line.parse({"task": "worker-0", "attempt": 1, "step": 20, "time": 9.0, "input_wait": 1.5}),
             metric_line.parse({"task": "worker-1", "attempt": 1, "step": 20, "time": 9.0})]
    points = sorted(g.points_from_lines(lines), key=lambda p: p.step)
    assert [p.input_share for p in points] == [0.7, 0.0]      # 1.5 is no share: not counted


def test_the_time_a_scheduler_held_the_tasks_is_queued_not_start_up():
    # Submitted at 2, held by Slurm until 32 (a reader saw it start), first sync point at 40.
    state = _run([Attempt(1, started=2.0, ended=150.0, last_step=101, dequeued=32.0)])
    found = g.account(state, _points(1, range(1, 102), 40.0, 1.0), now=999.0)
    assert found.causes[g.QUEUED] == pytest.approx(30 * 2)
    assert found.causes[g.STARTUP] == pytest.approx(8 * 2)
    assert found.causes[g.TRAINING] == pytest.approx(100 * 2)
    assert sum(found.causes.values()) == pytest.approx(found.total_s)
    # A job that never reported: its hold is still queued, the rest unreported.
    quiet = g.account(_run([Attempt(1, started=0.0, ended=50.0, dequeued=20.0)]), [], now=0)
    assert quiet.causes[g.QUEUED] == pytest.approx(40) and quiet.causes[g.UNREPORTED] == pytest.approx(60)


def test_what_pruning_saved_is_the_unrun_steps_at_the_trials_own_pace():
    # 40 steps run in 80 task-seconds of window (training 60, saves 20), 100 planned: the 60
    # steps it did not run would have cost 2 task-seconds each; start-up is not repeated.
    ran = g.Goodput(130.0, {**dict.fromkeys(g.CAUSES, 0.0), g.TRAINING: 60.0, g.SAVES: 20.0, g.STARTUP: 50.0})
    assert g.unrun_cost(ran, 40, 100) == pytest.approx(120.0)
    assert g.unrun_cost(ran, 100, 100) == 0.0                  # it ran them all
    assert g.unrun_cost(ran, 40, None) is None                 # planned steps not known
    assert g.unrun_cost(ran, None, 100) is None                # pruned at an unknown step
    assert g.unrun_cost(g.Goodput(0.0, {}, reported=False), 40, 100) is None


def test_following_the_local_copies_gives_what_reading_them_whole_gives(tmp_path):
    """Monitor's bar folds only the lines added since its last read (runs.goodput.Following): at
    every step it says what ``here`` says from the whole copy, as the copy grows, is replaced
    by a shorter one, and is overtaken by the other copy; a half-written last line waits."""
    import json
    from backend.runs import goodput as reading

    def lines(steps, attempt=1, wait=0.2):
        return "".join(json.dumps({"task": t, "attempt": attempt, "step": s, "time": 100.0 + s,
                                   "input_wait": wait if t == "worker-1" else 0.0,
                                   "blocked": {"save": 0.5} if s % 50 == 0 else {}}) + "\n"
                       for s in steps for t in ("worker-0", "worker-1")).encode()

    state = _run([Attempt(1, started=90.0, ended=400.0)])
    kept, mirror = reading.copies(tmp_path)
    follow = reading.Following(tmp_path)
    assert follow.of(state, now=500.0).reported is False               # no copy yet
    kept.write_bytes(lines(range(1, 101)))

    def same():
        assert follow.of(state, now=500.0).causes == reading.here(state, tmp_path, now=500.0).causes
    same()
    with open(kept, "ab") as fh:                                        # grows, the last line half written
        fh.write(lines(range(101, 201)) + b'{"task": "worker-0", "attempt": 1, "st')
    same()
    assert follow.offset == kept.stat().st_size - len(b'{"task": "worker-0", "attempt": 1, "st')
    replaced = tmp_path / "new"
    replaced.write_bytes(lines(range(1, 51), wait=0.5))
    replaced.replace(kept)                                              # a new, shorter copy
    same()
    mirror.parent.mkdir(parents=True)
    mirror.write_bytes(lines(range(1, 301)))                            # the mirror is now the longer
    same()
    assert follow.path == mirror
