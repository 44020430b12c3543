"""How an attempt whose tasks saved and exited on a preemption signal is judged (issue 29)."""
from backend.client.harness import preempt
from backend.records.outcome import TaskPhase, TaskStatus, Verdict, conclude, preempted_reason


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


def test_a_save_on_the_time_limit_warning_says_it_was_the_time_limit_and_how_to_go_on():
    """Issue 35: a Slurm job's time limit is not a preemption by another job."""
    from backend.config.slurm_spec import slurm_from_dict
    from backend.engines.slurm import SlurmEngine
    from backend.records.outcome import how_to_go_on
    record = {"step": 10, "signal": "SIGUSR2", "seconds": 0.4}
    engine = SlurmEngine(None, slurm_from_dict({"kind": "slurm", "host": "login", "time_limit": "30"}))
    assert engine.time_limit(record) == "30"                       # the cluster file's word
    assert engine.time_limit({**record, "signal": "SIGTERM"}) is None   # scancel, a real preemption
    assert engine.time_limit(None) is None
    reason = preempted_reason(record, time_limit="00:30:00") + how_to_go_on(10, time_limit="00:30:00")
    assert reason == ("preempted: saved at step 10 (SIGUSR2, 0.4 s after the signal): the Slurm job "
                      "reached its time limit (00:30:00); to go on: Restore from step 10 (and raise "
                      "time_limit in the cluster file so the rest fits), or launch with restart: "
                      "on_failure to resume by itself at each time limit")
    assert preempted_reason(record) == "preempted: saved at step 10 (SIGUSR2, 0.4 s after the signal)"
    assert how_to_go_on(None, time_limit=None).startswith("; to go on: Restore from its newest checkpoint")
