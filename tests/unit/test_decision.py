"""The keeper's decisions as tables (backend/records/decision.py, issue 57 item 3): one row per
fault case of docs/reliability.md that concerns restarts and hosts. Pure: no host, no process, no
sleep; every clock is a number in the row."""
from __future__ import annotations

import pytest

from backend.config.spec import RestartPolicy
from backend.diagnosis import diagnose
from backend.records.decision import (CASUALTY_WAIT_S, Clocks, Kind, Membership, Seen, advance, cause, decide,
                                      decide_membership, decide_restart, decide_start_failure, gone)
from backend.records.outcome import (AFTER_THE_CHIEF, CHIEF_DONE_GRACE_S, KeyChange, TaskPhase, TaskStatus,
                                     conclude)

R, X, E, U, Q = TaskPhase.RUNNING, TaskPhase.EXITED, TaskPhase.EXITED, TaskPhase.UNREACHABLE, TaskPhase.QUEUED
H2, H3 = "127.0.0.2", "127.0.0.3"
POLICY = RestartPolicy(mode="on_failure", max_restarts=3, backoff_s=5.0, stall_timeout_s=300.0,
                       unreachable_grace_s=120.0, host_gone_s=120.0, max_preemptions=2)
NOT_ANSWERING = f"{H3}: cannot connect to {H3}:2222: [Errno 111] Connection refused. Check the host name"
OLD, NEW = "SHA256:oldoldold", "SHA256:newnewnew"
TRUST = f"tfconsole trust-host {H3} --port 2222 --fingerprint {NEW} --replace"
KEY = KeyChange((OLD,), NEW, TRUST)
HEARTBEATS = diagnose.SILENT_PEER_HEAD + "worker-1. It is hung"


def chief(state=R, code=None, why=None, **kw):
    return TaskStatus("worker-0", H2, state, code, why, **kw)


def worker(state=R, code=None, why=None, **kw):
    return TaskStatus("worker-1", H3, state, code, why, **kw)


# (case in docs/reliability.md, statuses, seconds since the clock's condition began, idle s, kind, reason holds)
POLLS = [
    ("every task exited 0: finished", [chief(X, 0), worker(X, 0)], 0, None, Kind.FINISHED, "finished"),
    ("kill -9 of the non-chief worker; its peer lost the collective",
     [chief(E, 1, diagnose.PEER_DIED), worker(E, -9)], 0, None, Kind.END_ATTEMPT, "worker-1 exited(-9)"),
    ("kill -9 of the chief over SSH", [chief(E, -9), worker(E, 1, diagnose.PEER_DIED)], 0, None,
     Kind.END_ATTEMPT, "worker-0 exited(-9)"),
    ("a casualty shows first: wait for the cause", [chief(E, 1, diagnose.PEER_DIED), worker(R)], 0, None,
     Kind.WAIT, "worker-0 exited(1)"),
    ("the cause never showed within CASUALTY_WAIT_S", [chief(E, 1, diagnose.PEER_DIED), worker(R)],
     CASUALTY_WAIT_S + 1, None, Kind.END_ATTEMPT, "worker-0 exited(1)"),
    ("a hung (SIGSTOPped) worker is named at once", [chief(E, 1, HEARTBEATS), worker(R)], 0, None,
     Kind.END_ATTEMPT, "worker-1 hung: stopped sending heartbeats"),
    ("sshd of a worker host down: unknown, within the grace", [chief(R), worker(U, why=NOT_ANSWERING)], 30, None,
     Kind.WAIT, f"no answer from worker-1 ({H3})"),
    ("sshd of a worker host down past unreachable_grace_s", [chief(R), worker(U, why=NOT_ANSWERING)], 121, None,
     Kind.END_ATTEMPT, f"no answer from worker-1 ({H3}) for 121 s"),
    ("a hung job: no sign of life for stall_timeout_s", [chief(R), worker(R)], 0, 301.0, Kind.END_ATTEMPT,
     "stalled: no metrics, log output or CPU time for 301 s from worker-0, worker-1"),
    ("a quiet job within its stall timeout", [chief(R), worker(R)], 0, 299.0, Kind.GO_ON, ""),
    ("a long wait in the scheduler's queue is no stall", [chief(Q), worker(Q)], 0, None, Kind.GO_ON, ""),
    ("Keras 3 model.fit under the strategy: no restart can cure it", [chief(E, 1, diagnose.KERAS_FIT), worker(R)],
     0, None, Kind.GIVE_UP, "worker-0 exited(1)"),
    ("every task saved and exited on a preemption signal", [chief(E, 75), worker(E, 75)], 0, None,
     Kind.PREEMPTED, "preempted"),
    # issue 56 item 5: a host that reboots: every process on it gone, its sshd too. The chief's
    # exit is the echo; the host that stopped answering, and its task, come first.
    ("a host reboots mid-run: the chief's casualty shows, its host does not answer",
     [chief(E, 1, diagnose.PEER_DIED), worker(U, why=NOT_ANSWERING)], 0, None, Kind.WAIT, "worker-0 exited(1)"),
    ("a host reboots mid-run: the host is named first, after the casualty wait",
     [chief(E, 1, diagnose.PEER_DIED), worker(U, why=NOT_ANSWERING)], CASUALTY_WAIT_S + 1, None, Kind.END_ATTEMPT,
     f"host {H3} stopped answering (worker-1: cannot connect to {H3}:2222: [Errno 111] Connection refused); "
     "so worker-0 exited(1)"),
    ("a rebooting host's peer gave up on its heartbeats: the host, not a hang",
     [chief(E, 1, HEARTBEATS), worker(U, why=NOT_ANSWERING)], 0, None, Kind.END_ATTEMPT,
     f"host {H3} stopped answering (worker-1: cannot connect"),
    # A network cut between two workers (TF traffic dropped, SSH fine): the chief's log names
    # worker-1 as silent, worker-1's own heartbeats timed out. Neither is the cause: both named.
    ("a cut between two workers: they lost each other, both tasks and hosts named",
     [chief(E, 1, HEARTBEATS), worker(E, 1, diagnose.HEARTBEAT_LOST)], 0, None, Kind.END_ATTEMPT,
     f"worker-0 ({H2}) and worker-1 ({H3}) lost each other: heartbeats timed out both ways"),
    ("a worker that lost the chief while the chief runs: a casualty, wait for the cause",
     [chief(R), worker(E, 1, diagnose.HEARTBEAT_LOST)], 0, None, Kind.WAIT, "worker-1 exited(1)"),
    # A finished run ends in bounded time: the chief exited 0 (its steps and last save are done);
    # a peer after that only shuts down, retrying heartbeats to the chief's closed port.
    ("the chief finished; a peer still shuts down within the grace",
     [chief(X, 0, ended_ago_s=CHIEF_DONE_GRACE_S - 1), worker(R)], 0, None, Kind.GO_ON, ""),
    ("the chief finished; a peer runs on past the grace: stopped, the run finished",
     [chief(X, 0, ended_ago_s=CHIEF_DONE_GRACE_S + 1), worker(R)], 0, None, Kind.FINISHED,
     f"{AFTER_THE_CHIEF} (worker-1 still shutting down 16 s after it: stopped)"),
    ("the chief finished; how long ago is unknown: the peer is not stopped",
     [chief(X, 0), worker(R)], 0, None, Kind.GO_ON, ""),
    ("the chief finished; a peer lost it as it ended: no failure, no restart",
     [chief(X, 0, ended_ago_s=2.0), worker(E, 1, diagnose.HEARTBEAT_LOST)], 0, None, Kind.FINISHED,
     f"{AFTER_THE_CHIEF} (worker-1 lost the chief as it ended)"),
    ("the chief finished; a peer failed with its own error: a failure",
     [chief(X, 0, ended_ago_s=60.0), worker(E, 1, "ValueError: bad batch")], 0, None, Kind.END_ATTEMPT,
     "worker-1 exited(1)"),
    ("the chief finished; a peer's host does not answer: no verdict on it yet",
     [chief(X, 0, ended_ago_s=60.0), worker(U, why=NOT_ANSWERING)], 30, None, Kind.WAIT, "no answer from worker-1"),
    # issue 56 item 6: a changed host key: held for the operator, however long, never a failure.
    ("a host key CHANGED mid-run: held, with both fingerprints and the fix",
     [chief(R), worker(U, why="host key CHANGED", key_change=KEY)], 3600, None, Kind.WAIT,
     f"host key CHANGED for {H3} (worker-1): known {OLD}, now {NEW}; check with the host's admin, then {TRUST}"),
    ("a changed key beside a silent host: the silence has its grace",
     [TaskStatus("worker-0", "127.0.0.4", U, diagnosis="127.0.0.4: cannot connect"),
      worker(U, why="host key CHANGED", key_change=KEY)], 121, None, Kind.END_ATTEMPT,
     f"no answer from worker-0 (127.0.0.4); host key CHANGED for {H3} (worker-1)"),
]


@pytest.mark.parametrize("case, statuses, waited, idle, kind, reason", POLLS, ids=[row[0] for row in POLLS])
def test_each_poll_decides_what_the_keeper_does(case, statuses, waited, idle, kind, reason):
    found = conclude(statuses)
    now = 1000.0
    clocks = advance(Clocks(now - waited, now - waited, now - waited), found, now)
    # A clock that did not run before this poll starts now: that is what ``advance`` must say.
    seen = Seen(found, tuple(statuses), idle, tuple(s.name for s in statuses))
    decision = decide(seen, clocks, POLICY)
    assert decision.kind == kind, decision
    assert reason in decision.reason, decision.reason
    # A finished attempt whose peer runs on is stopped before it is recorded; no other is.
    assert decision.stop_rest == (kind == Kind.FINISHED and any(s.state == R for s in statuses))


def test_the_first_poll_of_a_wait_says_so_once_and_backs_off_only_for_a_host():
    statuses = (chief(R), worker(U, why=NOT_ANSWERING))
    found = conclude(list(statuses))
    first = advance(Clocks(10.0), found, 10.0)
    said = decide(Seen(found, statuses), first, POLICY)
    assert said.note == f"no answer from worker-1 ({H3}): waiting up to 120 s" and said.back_off
    later = decide(Seen(found, statuses), advance(first, found, 15.0), POLICY)
    assert later.kind == Kind.WAIT and later.note == "" and later.back_off
    casualty = conclude([chief(E, 1, diagnose.PEER_DIED), worker(R)])
    waits = decide(Seen(casualty), advance(Clocks(20.0), casualty, 20.0), POLICY)
    assert waits.note.startswith("worker-0 exited(1) lost its collective: waiting up to 10 s") and not waits.back_off


def test_a_changed_key_says_on_the_first_poll_that_the_run_is_held():
    statuses = (chief(R), worker(U, why="host key CHANGED", key_change=KEY))
    found = conclude(list(statuses))
    held = decide(Seen(found, statuses), advance(Clocks(5.0), found, 5.0), POLICY)
    assert held.kind == Kind.WAIT and held.note.endswith("holding the run as it is until the key is checked")
    assert "trust-host" in cause(statuses) and cause((chief(R), worker(R))) == ""


# (case, clocks before, verdict's statuses, clocks after: unreachable since, casualties since)
CLOCKS = [
    ("a host stops answering: its clock starts", Clocks(0), [chief(R), worker(U)], (5.0, None)),
    ("it goes on not answering: the clock keeps its start", Clocks(1, 1.0, None), [chief(R), worker(U)], (1.0, None)),
    ("it answers again: the clock stops", Clocks(1, 1.0, None), [chief(R), worker(R)], (None, None)),
    ("a casualty shows: its clock starts", Clocks(0), [chief(E, 1, diagnose.PEER_DIED), worker(R)], (None, 5.0)),
    ("a host silent while a casualty waits: both kept", Clocks(1, None, 2.0), [chief(R), worker(U)], (5.0, 2.0)),
]


@pytest.mark.parametrize("case, before, statuses, after", CLOCKS, ids=[row[0] for row in CLOCKS])
def test_the_clocks_start_and_stop_with_their_conditions(case, before, statuses, after):
    moved = advance(before, conclude(statuses), 5.0)
    assert (moved.now, moved.unreachable_since, moved.casualties_since) == (5.0, *after)


# (case, host -> since when silent, host_gone_s, gone)
GONE = [
    ("a host unanswered for host_gone_s is gone for good", {H3: 0.0}, 120.0, {H3: "unreachable for 121 s"}),
    ("a host back within host_gone_s (an sshd outage, a reboot) is not", {H3: 60.0}, 120.0, {}),
    ("a host whose key changed answered: never silent, never gone", {}, 3.0, {}),
]


@pytest.mark.parametrize("case, silent, limit, expected", GONE, ids=[row[0] for row in GONE])
def test_a_host_is_gone_for_good_only_after_its_silence(case, silent, limit, expected):
    assert gone(silent, 121.0, limit) == expected


PREEMPT = "preempted: saved at step 40 (SIGTERM, 1.0 s after the signal)"
# (case, attempts' reasons, lost hosts, kind, why)
RESTARTS = [
    ("a failure with restarts left: restart after the backoff", ["worker-1 exited(-9)"], [], Kind.RESTART, ""),
    ("max_restarts used: give up (test_failing_job_ends_failed_with_its_traceback)",
     ["boom", "boom", "boom", "boom"], [], Kind.GIVE_UP, "gave up after 3 restart(s)"),
    ("a preemption uses no restart", ["boom", "boom", "boom", PREEMPT], [], Kind.RESTART, ""),
    ("more preemptions than max_preemptions: give up", [PREEMPT, PREEMPT, PREEMPT], [], Kind.GIVE_UP,
     "gave up after 2 preemption(s)"),
    ("the cluster's own requeue uses no restart (Slurm)",
     ["requeued by Slurm: job 7 went back to the queue", "boom", "boom", "boom"], [], Kind.RESTART, ""),
    ("a start cut off by a killed keeper uses no restart",
     ["boom", "launch interrupted: KeyboardInterrupt", "launch interrupted: KeyboardInterrupt"], [], Kind.RESTART, ""),
    ("a host lost for good: find its tasks a place first", ["worker-1: host h3 unreachable for 121 s"], [H3],
     Kind.RESTART, ""),
]


@pytest.mark.parametrize("case, reasons, lost, kind, why", RESTARTS, ids=[row[0] for row in RESTARTS])
def test_a_restart_follows_the_policy(case, reasons, lost, kind, why):
    decision = decide_restart(reasons, POLICY, lost=lost)
    assert (decision.kind, decision.why, decision.reason) == (kind, why, reasons[-1])
    if kind == Kind.RESTART:
        assert decision.wait_s == POLICY.backoff_s and decision.replace == tuple(lost)


LOST = "worker-1: host 127.0.0.3 unreachable for 121 s"
# (case, new membership, kind, hosts, why)
MEMBERSHIP = [
    ("a host lost for good, a spare listed: its task moves (test_spare_hosts)",
     Membership({"worker-1": "127.0.0.4"}, reason=f"{LOST}; moved to spare 127.0.0.4"),
     Kind.MOVE_TO_SPARE, {"worker-1": "127.0.0.4"}, ""),
    ("no spare left: the run fails saying what would have saved it",
     Membership(missing=("worker-1",), reason=f"{LOST}; no spare left for worker-1"), Kind.GIVE_UP, {},
     "a host is gone for good"),
    ("no spare, min_workers met: the run shrinks",
     Membership(dropped=("worker-1",), reason=f"{LOST}; no spare left: runs on 2 task(s) without worker-1"),
     Kind.SHRINK, {}, ""),
    ("the lost host answered the new membership's checks: the same hosts", Membership(reason=LOST),
     Kind.RESTART, {}, ""),
]


@pytest.mark.parametrize("case, found, kind, hosts, why", MEMBERSHIP, ids=[row[0] for row in MEMBERSHIP])
def test_a_lost_host_moves_to_a_spare_shrinks_or_gives_up(case, found, kind, hosts, why):
    restart = decide_restart([LOST], POLICY, lost=[H3])
    decision = decide_membership(restart, found)
    assert (decision.kind, dict(decision.hosts), decision.why) == (kind, hosts, why)
    assert decision.reason == (found.reason if kind != Kind.RESTART else LOST)


# (case, seconds the next attempt has failed to start, kind, reason holds)
STARTS = [
    ("a next attempt that cannot start, within the answer bound: try again", 10.0, Kind.WAIT,
     "attempt 3 did not start, trying again: no run folder"),
    ("... past it (test_a_restart_that_cannot_start_ends_the_run_failed_saying_why)", 121.0, Kind.GIVE_UP,
     "attempt 3 could not start for 121 s: no run folder"),
]


@pytest.mark.parametrize("case, waited, kind, reason", STARTS, ids=[row[0] for row in STARTS])
def test_a_restart_that_cannot_start_gives_up_after_the_answer_bound(case, waited, kind, reason):
    decision = decide_start_failure(3, "no run folder", waited, 120.0)
    assert decision.kind == kind and reason in decision.reason
    assert decision.why == ("gave up restarting" if kind == Kind.GIVE_UP else "")


def test_a_workers_heartbeat_deadline_reads_as_a_lost_link_not_its_own_error():
    """The two logs of a network cut between worker-0 (chief) and worker-1 (TF 2.21's lines)."""
    chief_log = ("2026-12-01 E coordination_service.cc] The following tasks are unhealthy (stopped sending heartbeats):\n"
                 "/job:worker/replica:0/task:1\nThe tasks have crashed or hung.\n")
    worker_log = ("tensorflow.python.framework.errors_impl.DeadlineExceededError: Failed to send RPC to "
                  "coordination service. ... /tensorflow.CoordinationService/Heartbeat\n")
    assert diagnose.silent_peers(diagnose.diagnose(chief_log)) == ["worker-1"]
    said = diagnose.diagnose(worker_log)
    assert said == diagnose.HEARTBEAT_LOST and diagnose.casualty(said)
    found = conclude([chief(E, 1, diagnose.diagnose(chief_log)), worker(E, 1, said)])
    assert found.reason.startswith(f"worker-0 ({H2}) and worker-1 ({H3}) lost each other"), found.reason
