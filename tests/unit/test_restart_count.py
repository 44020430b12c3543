"""What the keeper's restart policy has used, and where a start cut off mid-way goes (issue 35)."""
from backend.records.outcome import FREE_INTERRUPTED_STARTS, cut_off_phase, restarts_used

CUT = "launch interrupted: the launching process (pid 7) is gone"


def test_a_failure_uses_a_restart_and_a_cut_off_start_does_not():
    assert restarts_used(["worker-0 exited(3)"]) == 0        # nothing restarted yet
    assert restarts_used(["worker-0 exited(3)", CUT]) == 0   # the restart after attempt 1 never ran
    # ... it ran as attempt 3, which failed too: one restart used
    assert restarts_used(["worker-0 exited(3)", CUT, "worker-1 exited(1)"]) == 1
    assert restarts_used(["worker-0 exited(3)", "stalled: ...", "worker-1 lost"]) == 2


def test_preemptions_and_requeues_use_no_restart():
    assert restarts_used(["preempted: saved at step 10 (SIGTERM, 0.4 s after the signal)",
                          "requeued by Slurm: job 5 went back to the queue", "worker-0 exited(1)"]) == 0
    assert restarts_used(["preempted: saved at step 10 (SIGTERM)", CUT, "worker-0 exited(1)"]) == 0


def test_a_keeper_cut_off_at_every_start_runs_out_of_restarts():
    reasons = ["worker-0 exited(3)"] + [CUT] * (FREE_INTERRUPTED_STARTS + 2)
    assert restarts_used(reasons) == 2


def test_a_cut_off_restart_resumes_the_policy_and_any_other_start_fails():
    keeper = {"pid": 7, "host": "h", "start": 1, "cut_off": "restarting"}
    assert cut_off_phase(keeper, kept=True) == "restarting"
    assert cut_off_phase(keeper, kept=False) == "failed"   # no policy to resume
    assert cut_off_phase({"pid": 7, "host": "h", "start": 1, "cut_off": "failed"}, kept=True) == "failed"
    assert cut_off_phase({"pid": 7, "host": "h", "start": 1}, kept=True) == "failed"   # an older record
    assert cut_off_phase(None, kept=True) == "failed"
