"""How an attempt whose tasks saved and exited on a preemption signal is judged (issue 29)."""
from backend.harness import preempt
from backend.runs.outcome import TaskPhase, TaskStatus, Verdict, conclude, preempted_reason


def _t(name, state, code=None):
    return TaskStatus(name, "h", state, code)


def test_every_task_saved_on_the_signal_is_a_preemption_not_a_failure():
    found = conclude([_t("worker-0", TaskPhase.EXITED, preempt.EXIT_CODE),
                      _t("worker-1", TaskPhase.EXITED, preempt.EXIT_CODE)])
    assert found.verdict == Verdict.PREEMPTED and found.all_ended


def test_a_peer_still_saving_is_waited_for():
    found = conclude([_t("worker-0", TaskPhase.EXITED, preempt.EXIT_CODE),
                      _t("worker-1", TaskPhase.RUNNING)])
    assert found.verdict == Verdict.GOING


def test_a_peer_that_failed_its_save_fails_the_attempt():
    found = conclude([_t("worker-0", TaskPhase.EXITED, preempt.EXIT_CODE),
                      _t("worker-1", TaskPhase.EXITED, 1)])
    assert found.verdict == Verdict.FAILED and found.reason.startswith("worker-1 exited(1)")


def test_the_reason_names_the_step_the_signal_and_a_missed_grace():
    record = {"step": 40, "signal": "SIGTERM", "seconds": 31.5, "grace_s": 25.0,
              "within_grace": False}
    assert preempted_reason(record) == ("preempted: saved at step 40 (SIGTERM, 31.5 s after the "
                                        "signal, over the grace of 25 s)")
