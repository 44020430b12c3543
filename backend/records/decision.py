"""What the keeper does next, decided apart from doing it.

Pure: no I/O, no sleep, no clock read. The keeper gathers what happened (the attempt's
``outcome.Conclusion`` and its tasks' statuses, how long the run showed no sign of life), reads its
clocks (when a host stopped answering, when a casualty was first seen) and passes them in with the
run's attempts and its restart policy; it gets back a ``Decision`` (hold, stop and restart, move
tasks to spares, shrink, give up), with the reason the run's record, ``status`` and the alerts
say, and carries it out. The shape is Ray Train's ``FailurePolicy.make_decision`` ->
``FailureDecision``: the tests are tables that never sleep (tests/unit/test_decision.py).

Three moments, three functions: each poll of a run underway (``decide``), the start of the next
attempt (``decide_restart``, then ``decide_membership`` once the lost hosts' tasks found a place),
and a next attempt that did not start (``decide_start_failure``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from backend.diagnosis import diagnose
from backend.records.outcome import (PREEMPTED, Conclusion, TaskPhase, TaskStatus, Verdict, failure_reason,
                                     restarts_used, stall_reason)

# How long a failure that only shows casualties (peers whose collective aborted) waits for the
# task that died first to show too, so the attempt's reason names the cause, not a casualty.
CASUALTY_WAIT_S = 10.0


class Kind(enum.StrEnum):
    GO_ON = "go on"                  # nothing to do this poll
    WAIT = "wait"                    # hold the run as it is: no task is touched
    FINISHED = "finished"            # every task exited 0: record the end
    PREEMPTED = "preempted"          # every task saved on a signal: stop them, resume from that step
    END_ATTEMPT = "end attempt"      # failed or stalled: stop every task; the restart is decided next
    RESTART = "restart"              # start the next attempt on the same hosts
    MOVE_TO_SPARE = "move to spare"  # ... with the lost hosts' tasks on spares
    SHRINK = "shrink"                # ... without the lost hosts' tasks (min_workers)
    GIVE_UP = "give up"              # end failed (after a poll: once every task is stopped)


@dataclass(frozen=True)
class Decision:
    kind: Kind
    reason: str = ""      # what the attempt's record says (or why the run is held)
    why: str = ""         # a give-up's headline: "gave up after 3 restart(s)"
    # The step to resume from where the decision knows it; None: the newest checkpoint every task
    # holds and TensorFlow reads whole, which only the hosts can tell (``runs.restorable``).
    from_step: int | None = None
    hosts: Mapping[str, str] = field(default_factory=dict)   # task -> its new host (spares)
    replace: tuple[str, ...] = ()   # a restart's lost hosts: find their tasks a place first
    wait_s: float = 0.0             # wait this long before acting (the restart's backoff)
    back_off: bool = False          # poll less and less often meanwhile (a host does not answer)
    note: str = ""                  # said once, as the wait begins
    stalled: bool = False           # ended for a stall: every task's stacks are saved first
    stop_rest: bool = False         # finished though a peer runs on after the chief: stop it first


@dataclass(frozen=True)
class Clocks:
    """The keeper's clocks at one poll, read by the keeper: ``now``, and since when a host has not
    answered and since when the failure has shown only casualties (None: not so)."""
    now: float
    unreachable_since: float | None = None
    casualties_since: float | None = None


@dataclass(frozen=True)
class Seen:
    """What one poll saw: the verdict on the attempt, its tasks' statuses and, for a run going
    on, how long it showed no sign of life (None: not looked at, as while queued)."""
    found: Conclusion
    statuses: tuple[TaskStatus, ...] = ()
    idle_s: float | None = None
    tasks: tuple[str, ...] = ()   # the attempt's task names, for a stall's reason


def advance(clocks: Clocks, found: Conclusion, now: float) -> Clocks:
    """The clocks after a poll with this verdict: each starts when its condition begins, stops
    when it ends; a host that does not answer leaves the casualty clock as it was."""
    unknown = found.verdict == Verdict.UNKNOWN
    if unknown:
        casualties = clocks.casualties_since
    elif found.verdict == Verdict.FAILED and found.casualties_only:
        casualties = clocks.casualties_since if clocks.casualties_since is not None else now
    else:
        casualties = None
    since = clocks.unreachable_since if clocks.unreachable_since is not None else now
    return Clocks(now, since if unknown else None, casualties)


def decide(seen: Seen, clocks: Clocks, policy) -> Decision:
    """One poll of a run underway: what the keeper does now. ``policy``: the job's RestartPolicy."""
    verdict = seen.found.verdict
    if verdict == Verdict.FINISHED:
        return Decision(Kind.FINISHED, seen.found.reason, stop_rest=not seen.found.all_ended)
    if verdict == Verdict.PREEMPTED:
        return Decision(Kind.PREEMPTED, seen.found.reason)
    if verdict == Verdict.FAILED:
        return _failed(seen, clocks)
    if verdict == Verdict.UNKNOWN:
        return _unanswered(seen, clocks, policy)
    limit = policy.stall_timeout_s
    if seen.idle_s is not None and limit and seen.idle_s > limit:
        return Decision(Kind.END_ATTEMPT, stall_reason(seen.idle_s, list(seen.tasks)), stalled=True)
    return Decision(Kind.GO_ON)


def _failed(seen: Seen, clocks: Clocks) -> Decision:
    found = seen.found
    since = clocks.casualties_since if clocks.casualties_since is not None else clocks.now
    if found.casualties_only and clocks.now - since < CASUALTY_WAIT_S:
        note = (f"{found.reason.split(':')[0]} lost its collective: waiting up to "
                f"{CASUALTY_WAIT_S:.0f} s for the task that failed first") if since == clocks.now else ""
        return Decision(Kind.WAIT, found.reason, note=note)
    reason = failure_cause(found, seen.statuses)
    if diagnose.permanent(reason):
        return Decision(Kind.GIVE_UP, reason, why="no restart can cure this failure")
    return Decision(Kind.END_ATTEMPT, reason)


def failure_cause(found: Conclusion, statuses: Sequence[TaskStatus]) -> str:
    """The failed attempt's reason. When every failure is a casualty (a peer whose collective
    aborted) and a task's host does not answer, that host is the cause (a reboot takes every
    process on it and its sshd): it comes first, the exits it caused after it."""
    unanswered = [s for s in statuses if s.state == TaskPhase.UNREACHABLE]
    bad = [s for s in statuses if s.failed]
    if not unanswered or not bad or not all(diagnose.casualty(s.diagnosis) for s in bad):
        return found.reason
    return f"{hosts_text(unanswered)}; so {failure_reason(bad)}"


def _unanswered(seen: Seen, clocks: Clocks, policy) -> Decision:
    """Unknown: a host did not answer. A changed key is no silence: the host answered with
    another key, so the run is held for an operator's check for as long as it lasts, and never
    counts as a failure or a loss. Silence counts as a failure after ``unreachable_grace_s``."""
    grace = policy.unreachable_grace_s
    unanswered = [s for s in seen.statuses if s.state == TaskPhase.UNREACHABLE]
    silent = [s for s in unanswered if s.key_change is None]
    first = clocks.unreachable_since == clocks.now
    if unanswered and not silent:
        reason = hosts_text(unanswered)
        return Decision(Kind.WAIT, reason, back_off=True,
                        note=f"{reason}; holding the run as it is until the key is checked" if first else "")
    what = ("no answer from " + ", ".join(f"{s.name} ({s.host})" for s in silent)) if silent else seen.found.reason
    if len(silent) < len(unanswered):
        what += "; " + hosts_text([s for s in unanswered if s.key_change])
    waited = clocks.now - (clocks.unreachable_since if clocks.unreachable_since is not None else clocks.now)
    if waited > grace:
        return Decision(Kind.END_ATTEMPT, f"{what} for {waited:.0f} s")
    return Decision(Kind.WAIT, what, back_off=True, note=f"{what}: waiting up to {grace:.0f} s" if first else "")


def hosts_text(unanswered: Sequence[TaskStatus]) -> str:
    """Each host that did not answer, once, with its tasks: a changed key with both fingerprints
    and the fix, a silent host with the error that says how it failed."""
    by_host: dict[str, list[TaskStatus]] = {}
    for s in unanswered:
        by_host.setdefault(s.host, []).append(s)
    said = []
    for host, tasks in by_host.items():
        names, first = ", ".join(s.name for s in tasks), tasks[0]
        if first.key_change:
            k = first.key_change
            said.append(f"host key CHANGED for {host} ({names}): known {', '.join(k.known) or '?'}, "
                        f"now {k.offered}; check with the host's admin, then {k.trust}")
        else:
            said.append(f"host {host} stopped answering ({names}" + (f": {_first_sentence(first.diagnosis, host)})"
                                                                    if first.diagnosis else ")"))
    return "; ".join(said)


def _first_sentence(error: str, host: str) -> str:
    """``HostError``'s problem without its host prefix and its fix: how the host failed."""
    text = error[len(host) + 2:] if error.startswith(host + ": ") else error
    return text.split(". ")[0].rstrip(".")[:200]


def cause(statuses: Sequence[TaskStatus]) -> str:
    """What ``status`` says first while a task's host does not answer: that host and its task,
    ahead of the exits of peers that only lost their collective with it; empty otherwise."""
    unanswered = [s for s in statuses if s.state == TaskPhase.UNREACHABLE]
    return hosts_text(unanswered) if unanswered else ""


def gone(silent: Mapping[str, float], now: float, limit: float) -> dict[str, str]:
    """Hosts unanswered over SSH (host -> since when) for ``limit`` or more: gone for good
    (host -> for how long). A host whose key changed answered, so it is never in ``silent``."""
    return {h: f"unreachable for {now - since:.0f} s" for h, since in silent.items() if now - since >= limit}


def decide_restart(reasons: Sequence[str | None], policy, *, lost: Sequence[str] = ()) -> Decision:
    """The run is ``restarting``: give up when the policy is used up, else restart after the
    backoff. ``reasons``: every attempt's reason, oldest first; ``lost``: the hosts the last
    attempt lost for good, whose tasks need a place first (``decide_membership``)."""
    reason = (reasons[-1] if reasons else None) or "failed"
    if reason.startswith(PREEMPTED):
        preemptions = sum(1 for r in reasons if (r or "").startswith(PREEMPTED))
        if preemptions > policy.max_preemptions:
            return Decision(Kind.GIVE_UP, reason, why=f"gave up after {policy.max_preemptions} preemption(s)")
    elif restarts_used(list(reasons)) >= policy.max_restarts:
        return Decision(Kind.GIVE_UP, reason, why=f"gave up after {policy.max_restarts} restart(s)")
    return Decision(Kind.RESTART, reason, replace=tuple(lost), wait_s=policy.backoff_s)


@dataclass(frozen=True)
class Membership:
    """Where the lost hosts' tasks go (``membership.replace_lost``'s checked plan): task -> spare
    host, the tasks dropped (shrunk), those left with no place, and the reason that says it all."""
    moves: Mapping[str, str] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    reason: str = ""


def decide_membership(restart: Decision, found: Membership) -> Decision:
    """The restart once the lost hosts' tasks have a place: on spares, without them, or none."""
    if found.missing:
        return Decision(Kind.GIVE_UP, found.reason, why="a host is gone for good")
    if found.dropped:
        return replace(restart, kind=Kind.SHRINK, reason=found.reason, hosts=dict(found.moves))
    if found.moves:
        return replace(restart, kind=Kind.MOVE_TO_SPARE, reason=found.reason, hosts=dict(found.moves))
    return restart   # the lost hosts answered the new membership's checks: the same hosts again


def decide_start_failure(attempt: int, error: str, waited_s: float, bound_s: float) -> Decision:
    """The next attempt did not start: try again next poll for as long as a host has to answer
    (``bound_s``), then give up, so a cause that does not heal (a run folder gone) cannot keep
    the run ``restarting`` forever."""
    if waited_s < bound_s:
        return Decision(Kind.WAIT, f"attempt {attempt} did not start, trying again: {error}")
    return Decision(Kind.GIVE_UP, f"attempt {attempt} could not start for {waited_s:.0f} s: {error}",
                    why="gave up restarting")
