"""Who a stop's tasks say ended them (issue 56 item 9): the reason the stop recorded names it,
and a task that failed of its own before the stop keeps its error."""
from __future__ import annotations

import pytest

from backend.client.harness import preempt
from backend.records.outcome import AFTER_THE_CHIEF, TaskPhase, TaskStatus, conclude, mark_stopped, stopped_by


def _tasks() -> list[TaskStatus]:
    return [TaskStatus("worker-0", "h", TaskPhase.EXITED, 1, "The worker stopped with an error: KeyboardInterrupt"),
            TaskStatus("worker-1", "h", TaskPhase.EXITED, -15),
            TaskStatus("worker-2", "h", TaskPhase.EXITED, 1, "The worker stopped with an error: ValueError: bad shape"),
            TaskStatus("worker-3", "h", TaskPhase.EXITED, 0),
            TaskStatus("worker-4", "h", TaskPhase.EXITED, preempt.EXIT_CODE)]   # saved on the stop's TERM


@pytest.mark.parametrize("phase, reason, label", [
    ("stopped", "stopped", "stopped (by the user)"),
    ("stopped", "stopped: saved at step 19 on every worker", "stopped (by the user)"),
    ("stopped", "pruned by the sweep at step 18 (val_loss 0.52)", "stopped (pruned by the sweep)"),
    ("stopped", "stopped: sweep stopped (by alice)", "stopped (by the sweep)"),
    ("stopping", None, "stopped (by a stop under way)"),
    ("finished", f"{AFTER_THE_CHIEF} (worker-1 still shutting down 16 s after it: stopped)",
     "stopped (after the chief finished)"),
])
def test_tasks_a_stop_ended_say_who_stopped_them(phase, reason, label):
    shown = mark_stopped(_tasks(), stopped_by(phase, reason))
    assert [s.label for s in shown] == [label, label, "exited(1)", "exited(0)", label]
    assert shown[0].diagnosis is None and shown[2].diagnosis.endswith("ValueError: bad shape")
    assert conclude(shown).reason.startswith("worker-2 exited(1)")   # its own failure, not the stop


@pytest.mark.parametrize("phase, reason", [("failed", "worker-0 exited(1)"), ("running", None), ("finished", "finished"),
                                           ("stopped", "preempted: saved at step 10 (SIGTERM)")])
def test_a_run_no_stop_ended_keeps_its_tasks_errors(phase, reason):
    shown = mark_stopped(_tasks(), stopped_by(phase, reason))
    assert [s.label for s in shown] == ["exited(1)", "exited(-15)", "exited(1)", "exited(0)",
                                        f"exited({preempt.EXIT_CODE})"]
    assert shown[0].diagnosis.endswith("KeyboardInterrupt")


def test_a_slurm_task_the_stops_scancel_ended_reads_stopped_and_an_admins_cancel_stays_an_error():
    from backend.engines.slurm_states import JobInfo, task_statuses
    job = JobInfo(job_id="7", state="CANCELLED", nodes="n1")
    tasks = {"chief": {"info": {"node": "n1"}, "exit": 0}, "worker-0": {"info": {"node": "n1"}, "exit": None}}
    ours = mark_stopped(task_statuses(job, tasks, ["chief", "worker-0"]), stopped_by("stopped", "stopped"))
    assert [s.label for s in ours] == ["exited(0)", "stopped (by the user)"]
    theirs = mark_stopped(task_statuses(job, tasks, ["chief", "worker-0"]), stopped_by("failed", "worker-0 exited(1)"))
    assert theirs[1].failed and "cancelled (scancel" in theirs[1].diagnosis
