"""Who is the cause when a worker hangs (issue 47 item 1): its peers' logs carry TensorFlow's
heartbeat error naming it, and the attempt's reason blames it, not the peer that gave up.

The log below is worker-0's, copied from a real two-worker run (TF 2.21) whose worker-1 was
SIGSTOPped mid-run (docs/facts.md #19); the full run is tests/faults/test_faults.py::
test_a_hung_worker_is_named_and_the_run_recovers."""
from backend.diagnosis import diagnose
from backend.records.outcome import TaskStatus, Verdict, conclude

CASUALTY_LOG = """\
[worker-0] step 50/300 epoch 1 loss 1.49317 global_loss 1.22054 36.5 ms/step 439 ex/s
E0000 00:00:1795888723.418364    7277 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further. [type.googleapis.com/tensorflow.CoordinationServiceError='\\"\\n\\n\\x06worker\\x10\\x01']
E0000 00:00:1795888723.418506    7277 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.
The error could be from a previous operation. Restart your program to reset. [type.googleapis.com/tensorflow.DerivedStatus='']
Traceback (most recent call last):
tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:
[worker-0] HARNESS FAILED: UnavailableError: a peer worker died or is unreachable (collective aborted or timed out); see the other workers' logs. Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):
"""


def test_the_casualty_log_names_the_silent_peer():
    assert diagnose.silent_peers_in_log(CASUALTY_LOG) == ["worker-1"]
    said = diagnose.diagnose(CASUALTY_LOG)
    assert diagnose.silent_peers(said) == ["worker-1"] and diagnose.casualty(said), said
    assert not diagnose.silent_peers(diagnose.PEER_DIED) and diagnose.casualty(diagnose.PEER_DIED)


def test_the_hung_task_is_the_cause_not_the_peer_that_gave_up():
    said = diagnose.diagnose(CASUALTY_LOG)
    found = conclude([TaskStatus("worker-0", "h", "exited", 1, said), TaskStatus("worker-1", "h", "running")])
    assert found.verdict == Verdict.FAILED and not found.casualties_only   # no wait: the cause is known
    assert found.reason.startswith("worker-1 hung: stopped sending heartbeats"), found.reason
    assert "worker-0 exited(1)" not in found.reason and "worker-0 gave up" in found.reason
    # A named peer that failed by itself is named as before, with its own error.
    found = conclude([TaskStatus("worker-0", "h", "exited", 1, said),
                      TaskStatus("worker-1", "h", "exited", 1, "The worker stopped with an error: X")])
    assert found.reason == "worker-1 exited(1): The worker stopped with an error: X"
    # The named task not among the run's tasks (another naming): the casualty waits, as before.
    alone = conclude([TaskStatus("chief-0", "h", "exited", 1, said), TaskStatus("chief-1", "h", "running")])
    assert alone.casualties_only and alone.reason.startswith("chief-0 exited(1)")
