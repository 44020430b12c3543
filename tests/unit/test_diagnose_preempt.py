"""A preemption whose save did not finish within the grace time (issue 29): the killed worker's
diagnosis says so; a save that finished late is no failure to explain."""
from backend.diagnosis import diagnose

LATE = ("[worker-1] got SIGTERM: every worker saves at the next sync point, then exits (grace 1 s)\n"
        "[worker-1] PREEMPT GRACE EXCEEDED: no checkpoint saved within 1 s of the signal; a kill now "
        "keeps the previous checkpoint (still usable). Lower log_every, or give more time "
        "(preempt_grace_s, Slurm --signal lead, KillWait).\n")


def test_a_kill_before_the_save_finished_says_grace_and_previous_checkpoint():
    said = diagnose.diagnose(LATE)
    assert said.startswith("Preempted, but not saved within the grace of 1 s (preempt_grace_s)"), said
    assert "previous checkpoint stays usable" in said


def test_a_late_save_that_finished_is_not_a_failure_to_explain():
    assert diagnose.diagnose(LATE + "[worker-1] HARNESS PREEMPTED: saved at step 45 (3.2 s after "
                             "the signal, grace 1 s) {}\n") is None
