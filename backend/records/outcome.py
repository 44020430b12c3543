"""How a run's tasks stand, and the one function that decides whether an attempt has ended.

Pure: no I/O. ``Run.settle`` (any reader: the CLI, the console, ``Run.wait``) and the keeper
both decide through ``conclude``, so every reader agrees on how a run ended.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from backend.diagnosis import diagnose
from backend.errors import HostKeyChanged
from backend.client.harness.contract import preempt

PREEMPTED = "preempted"   # an attempt's reason starts so: every task saved and exited on a signal
# ... so: the chief finished and saved; the rest only shut down (``after_the_chief``).
AFTER_THE_CHIEF = "finished: the chief finished and saved"
# How long a peer may run on after the chief exited 0 before it is stopped: its own last writes
# (the TensorFlow tutorial's workers save to a temporary folder alongside the chief) take
# seconds; a peer past this only retries heartbeats to the chief's closed port.
CHIEF_DONE_GRACE_S = 15.0
REQUEUED = "requeued"     # ... so: the cluster requeued the job itself, and it ran again (Slurm)
INTERRUPTED = "launch interrupted"   # ... so: the process starting it died (or was interrupted)
# RunState.launcher's key: the phase that a start cut off by its process's death ends in. The
# keeper's restarts say "restarting": a new keeper resumes the policy instead of failing the run.
CUT_OFF = "cut_off"
# Starts of the keeper's that were cut off (the keeper killed mid-start) are retried without
# using a restart, this many times in a run; later ones count, so a keeper killed at every start
# cannot restart a run forever.
FREE_INTERRUPTED_STARTS = 3


class TaskPhase(enum.StrEnum):
    STARTING = "starting"        # the supervisor runs but has not recorded the task's pid yet
    RUNNING = "running"
    EXITED = "exited"            # with an exit code
    LOST = "lost"                # no process and no recorded exit code
    UNREACHABLE = "unreachable"  # its host did not answer: unknown, not failed
    QUEUED = "queued"            # a scheduler has not started it yet (Slurm): ``queue`` says why


@dataclass(frozen=True)
class KeyChange:
    """The task's host answered with another key than known_hosts trusts (``HostKeyChanged``):
    the fingerprints trusted, the one offered, and the command that replaces it once checked."""
    known: tuple[str, ...]
    offered: str
    trust: str


def key_change(err: Exception) -> KeyChange | None:
    """What a status read's error says of a changed host key, or None for any other error."""
    if not isinstance(err, HostKeyChanged):
        return None
    return KeyChange(err.known, err.fingerprint, err.trust)


@dataclass
class TaskStatus:
    name: str
    host: str
    state: TaskPhase
    exit_code: int | None = None
    diagnosis: str | None = None
    queue: str = ""              # while queued: the scheduler's reason and place (Resources, 1st of 2 waiting)
    ready: bool = False          # running, past TensorFlow's import (a harness task; remote.TaskInfo)
    set_up: bool = False         # running, and the run's train.json on its host is this attempt's
    key_change: KeyChange | None = None   # unreachable because its host's key CHANGED: no silence
    stopped_by: str = ""         # exited because a stop ended it (``mark_stopped``): who, in words
    ended_ago_s: float | None = None   # exited: how long ago, on its host's clock (None: not known)
    cancelled: bool = False      # ended by its scheduler's cancel (scancel: a stop's, or an admin's)

    @property
    def label(self) -> str:
        if self.stopped_by:
            return f"stopped ({self.stopped_by})"
        if self.state == TaskPhase.QUEUED and self.queue:
            return f"queued ({self.queue})"
        return f"exited({self.exit_code})" if self.state == TaskPhase.EXITED else str(self.state)

    @property
    def preempted(self) -> bool:
        """Exited on a preemption signal after saving its step (harness/preempt.py)."""
        return self.state == TaskPhase.EXITED and self.exit_code == preempt.EXIT_CODE

    @property
    def failed(self) -> bool:
        if self.stopped_by:
            return False   # what a stop asked for is no failure
        return self.state == TaskPhase.LOST or (self.state == TaskPhase.EXITED
                                                and self.exit_code not in (0, preempt.EXIT_CODE))

    @property
    def succeeded(self) -> bool:
        return self.state == TaskPhase.EXITED and self.exit_code == 0


def shown_phase(phase: str, statuses: list[TaskStatus]) -> str:
    """The run's phase as `status`, the pages and the API show it: a run whose every task still
    waits for the scheduler is ``queued``, with the scheduler's reason and place where it gives them."""
    if phase in ("running", "queued") and all_queued(statuses):
        return statuses[0].label
    return str(phase)


def all_queued(statuses: list[TaskStatus]) -> bool:
    """Whether the scheduler holds every task (none started): the run is ``queued``."""
    return bool(statuses) and all(s.state == TaskPhase.QUEUED for s in statuses)


_ENDED = (TaskPhase.EXITED, TaskPhase.LOST)

BY_THE_USER = "by the user"
# Who ended a run that ``Run.stop`` ended, from the reason it recorded (the first that fits).
# Every reason of a stop that someone asked for starts "stopped" ("stopped", "stopped: saved at
# step 19 on every worker", "stopped while starting"), except the sweep's and Restore's own.
_STOPPERS = (("pruned by the sweep", "pruned by the sweep"), ("stopped: sweep", "by the sweep"),
             ("restore from step", "for a restore"), ("stopped", BY_THE_USER))
# A stop that has not recorded its reason yet (or that a host kept from ending: ``stopping``).
STOP_UNDER_WAY = "by a stop under way"


AFTER_CHIEF_STOP = "after the chief finished"


def stopped_by(phase: str, reason: str | None) -> str:
    """Who stopped a run in ``phase`` whose current attempt ended with ``reason``; "" when no stop
    ended it (it runs, finished, failed, or was preempted: a preemption's exit code says so). A
    run finished while a peer only shut down: that peer was stopped once the chief finished."""
    if phase == "finished" and (reason or "").startswith(AFTER_THE_CHIEF):
        return AFTER_CHIEF_STOP
    if phase not in ("stopping", "stopped"):
        return ""
    if reason is None:
        return STOP_UNDER_WAY if phase == "stopping" else ""
    return next((who for head, who in _STOPPERS if reason.startswith(head)), "")


def mark_stopped(statuses: list[TaskStatus], who: str) -> list[TaskStatus]:
    """The tasks that a stop ended read "stopped (by the user)", not as failures: INT and TERM
    end a Python job with a KeyboardInterrupt traceback or a signal's exit code, and a peer then
    loses its collective; a harness task may save on the TERM and exit as on a preemption. A task
    whose log names an error of its own keeps it: it failed before."""
    if who:
        for s in statuses:
            if s.state == TaskPhase.EXITED and s.exit_code != 0 and _ended_by_a_stop(s):
                s.stopped_by, s.diagnosis = who, None
    return statuses


def _ended_by_a_stop(s: TaskStatus) -> bool:
    d = s.diagnosis
    return s.cancelled or d is None or d.endswith("KeyboardInterrupt") or diagnose.casualty(d)


class Verdict(enum.StrEnum):
    GOING = "going"          # tasks run (or start); nothing failed
    FINISHED = "finished"    # every task exited 0
    FAILED = "failed"        # a task exited non-zero or vanished: the attempt cannot succeed
    UNKNOWN = "unknown"      # nothing failed that we can see, but a host did not answer
    PREEMPTED = "preempted"  # every task ended, and they saved and exited on a preemption signal


@dataclass(frozen=True)
class Conclusion:
    verdict: Verdict
    reason: str = ""
    unreachable: tuple[str, ...] = ()   # task names whose host did not answer
    all_ended: bool = False             # no task is starting, running or unreachable
    # Every failure seen so far is a peer that lost its collective while another task has not
    # ended yet: the task that failed first may simply not be visible yet (its host answered
    # first, or its supervisor has not recorded the exit), so the reason may name a casualty.
    casualties_only: bool = False


def conclude(statuses: list[TaskStatus]) -> Conclusion:
    """The verdict on one attempt from its tasks' statuses.

    A confirmed failure wins over an unreachable host: under MultiWorkerMirroredStrategy one
    failed task dooms the attempt. An unreachable host alone is never a failure: the keeper
    gives it a grace window. The reason names the task that failed first, not the peers whose
    collective it aborted.
    """
    if not statuses:
        return Conclusion(Verdict.UNKNOWN, "no task status")
    unreachable = tuple(s.name for s in statuses if s.state == TaskPhase.UNREACHABLE)
    ended = all(s.state in _ENDED for s in statuses)
    bad = [s for s in statuses if s.failed]
    done = after_the_chief(statuses)
    if done:
        return Conclusion(Verdict.FINISHED, done, (), ended)
    if bad:
        only_casualties = all(diagnose.casualty(s.diagnosis) for s in bad)
        hung = hung_tasks(statuses) if only_casualties else []
        lost = lost_each_other(bad) if only_casualties and not hung else ""
        reason = hung_reason(hung, bad) if hung else lost or failure_reason(bad)
        # A hung task, or two that lost each other, is the cause already: nothing more to wait for.
        return Conclusion(Verdict.FAILED, reason, unreachable, ended,
                          only_casualties and not ended and not hung and not lost)
    if unreachable:
        return Conclusion(Verdict.UNKNOWN, "no answer from " + ", ".join(
            f"{s.name} ({s.host})" for s in statuses if s.state == TaskPhase.UNREACHABLE), unreachable)
    if ended and any(s.preempted for s in statuses):
        return Conclusion(Verdict.PREEMPTED, PREEMPTED, (), True)
    if ended:
        return Conclusion(Verdict.FINISHED, "finished", (), True)
    return Conclusion(Verdict.GOING)


def chief_of(statuses: list[TaskStatus]) -> TaskStatus:
    """The chief's status: ``chief-0`` where the job has one, else the first task (``RunState.chief``)."""
    return next((s for s in statuses if s.name == "chief-0"), statuses[0])


def after_the_chief(statuses: list[TaskStatus]) -> str:
    """The reason of an attempt that is over because its chief finished, though another task has
    not ended well (empty otherwise). Under MultiWorkerMirroredStrategy the chief exits 0 only
    once every step and its last save are done, and it holds the coordination service: what a
    peer does after that is its shutdown, which then only retries heartbeats to a closed port. So
    a peer still running ``CHIEF_DONE_GRACE_S`` after the chief's exit is stopped (the keeper and
    ``Run.settle``), and a peer that failed only for losing the chief is no failure."""
    chief = chief_of(statuses)
    if not chief.succeeded or len(statuses) < 2:
        return ""
    rest = [s for s in statuses if s is not chief and not s.succeeded and not s.preempted]
    if not rest or any(s.state in (TaskPhase.UNREACHABLE, TaskPhase.QUEUED) for s in rest):
        return ""
    failed = [s for s in rest if s.failed]
    if any(not diagnose.casualty(s.diagnosis) for s in failed):
        return ""   # a task's own error: it failed, whatever the chief did
    live = [s for s in rest if not s.failed]
    waited = chief.ended_ago_s
    if live and (waited is None or waited < CHIEF_DONE_GRACE_S):
        return ""   # a peer may still be writing its own files: give it the grace
    said = [f"{', '.join(s.name for s in failed)} lost the chief as it ended"] if failed else []
    if live:
        said.append(f"{', '.join(s.name for s in live)} still shutting down {waited:.0f} s after it: stopped")
    return f"{AFTER_THE_CHIEF} ({'; '.join(said)})"


def preempted_reason(record: dict | None, *, time_limit: str | None = None) -> str:
    """An attempt's reason after a preemption: the step every worker saved (the chief's
    ``tasks/<task>.preempted``), the signal, and whether it fitted the grace time. ``time_limit``:
    the signal was the scheduler's warning ahead of the job's time limit (Slurm), which is said."""
    if not record:
        return f"{PREEMPTED}: saved (step unknown: no record from the chief)"
    late = "" if record.get("within_grace", True) else \
        f", over the grace of {record.get('grace_s'):g} s"
    sig = record.get("signal") or "a peer's signal"
    why = f": the Slurm job reached its time limit ({time_limit})" if time_limit else ""
    return (f"{PREEMPTED}: saved at step {record['step']} ({sig}, "
            f"{record.get('seconds', 0):.1f} s after the signal{late}){why}")


def how_to_go_on(step: int | None, *, time_limit: str | None) -> str:
    """What a run that ended ``stopped`` on a preemption (no restart policy to resume it) says
    next: how to continue from the step it saved."""
    where = f"Restore from step {step}" if step is not None else "Restore from its newest checkpoint"
    if time_limit:
        return (f"; to go on: {where} (and raise time_limit in the cluster file so the rest fits), "
                "or launch with restart: on_failure to resume by itself at each time limit")
    return f"; to go on: {where}, or launch with restart: on_failure to resume by itself"


def hung_tasks(statuses: list[TaskStatus]) -> list[str]:
    """Who is the cause when peers gave up on a silent one: the tasks a failed task's log says
    stopped sending heartbeats (``diagnose.silent_peers``) that have not failed themselves. A
    frozen task keeps its process and its sockets, so it reads as running (or starting, or its
    host as unreachable) and never shows a failure of its own for the keeper to wait for."""
    names = {s.name: s for s in statuses}
    named = [n for s in statuses if s.failed for n in diagnose.silent_peers(s.diagnosis)]
    return [n for n in dict.fromkeys(named) if n in names and names[n].state not in _ENDED]


def hung_reason(hung: list[str], bad: list[TaskStatus]) -> str:
    """The attempt's reason when its failed tasks are casualties of hung ones: the hung task
    first (the cause), then who gave up on it."""
    gave_up = ", ".join(s.name for s in bad if diagnose.silent_peers(s.diagnosis))
    return (f"{', '.join(hung)} hung: stopped sending heartbeats while still running (frozen, "
            f"stopped or cut off), so {gave_up or 'its peers'} gave up on it")


def lost_each_other(bad: list[TaskStatus]) -> str:
    """The reason when the link between tasks was cut (SSH still fine, TensorFlow's traffic not):
    a task's log says a peer stopped sending heartbeats, and that peer failed because its own
    heartbeats timed out. Neither is the cause; both tasks and hosts are named. "" otherwise."""
    names = {s.name: s for s in bad}
    for s in bad:
        for peer in diagnose.silent_peers(s.diagnosis):
            other = names.get(peer)
            if other is not None and other.diagnosis == diagnose.HEARTBEAT_LOST:
                return (f"{s.name} ({s.host}) and {other.name} ({other.host}) lost each other: "
                        "heartbeats timed out both ways while both ran (the network between their "
                        "hosts cut, or one too loaded to answer); check TensorFlow's ports between them")
    return ""


def failure_reason(bad: list[TaskStatus]) -> str:
    # A failure no restart can cure names the attempt (the keeper then gives up at once); else the
    # first real failure, not a peer whose collective it aborted.
    first = sorted(bad, key=lambda s: (not diagnose.permanent(s.diagnosis or ""),
                                       diagnose.casualty(s.diagnosis)))[0]
    detail = first.diagnosis if first.diagnosis and first.diagnosis != diagnose.PEER_DIED else ""
    detail = diagnose.on_host(detail, first.host)   # a full disk: say on which host
    return f"{first.name} {first.label}" + (f": {detail[:300]}" if detail else "")


# -- stalls: judged by signs of life, not by missing metrics alone -----------------------------
# CPU counts as a sign of life from this share of one core on: a process blocked for good (in a
# sleep, a lock, a collective that will never complete) burns almost none, but TensorFlow's own
# background threads burn a little (their timers, gRPC), which must not pass for work.
MIN_CPU_SHARE = 0.05


@dataclass(frozen=True)
class Signs:
    """One task's signs of life at one poll (``hostctl liveness``): CPU seconds of its process
    group (None where they cannot be seen) and its log's size (None: no log yet)."""
    cpu_s: float | None = None
    log_size: int | None = None


@dataclass
class LifeWatch:
    """When the run last showed a sign of life: its metrics grew, a task's log grew, or a task's
    processes used CPU (``MIN_CPU_SHARE`` of a core or more since the last poll). A stall is a
    run that showed none for the stall timeout."""
    changed: float
    metrics_size: int = -1
    seen: dict[str, Signs] = field(default_factory=dict)   # task -> its signs at the last poll
    seen_at: float | None = None

    def observe(self, now: float, *, metrics_size: int | None = None,
                signs: dict[str, Signs] | None = None) -> list[str]:
        """Take one poll's readings; returns what advanced ("metrics", task names)."""
        moved = []
        if metrics_size is not None and metrics_size != self.metrics_size:
            self.metrics_size = metrics_size
            moved.append("metrics")
        wall = now - self.seen_at if self.seen_at is not None else None
        for task, new in (signs or {}).items():
            old = self.seen.get(task)
            if old is None or _advanced(old, new, wall):
                moved.append(task)
            self.seen[task] = new
        if signs is not None:
            self.seen_at = now
        if moved:
            self.changed = now
        return moved

    def idle(self, now: float) -> float:
        return now - self.changed


def _advanced(old: Signs, new: Signs, wall: float | None) -> bool:
    if new.log_size is not None and new.log_size != old.log_size:
        return True   # it wrote (or its log was replaced)
    if new.cpu_s is None or old.cpu_s is None or not wall:
        return False
    return new.cpu_s - old.cpu_s >= MIN_CPU_SHARE * wall


def stall_reason(idle_s: float, tasks: list[str]) -> str:
    """What the attempt's record says about a stall: which sign was missing, from which tasks."""
    return f"stalled: no metrics, log output or CPU time for {idle_s:.0f} s from {', '.join(tasks)}"


# -- restarts: what the policy has used ----------------------------------------------------------
def restarts_used(reasons: list[str | None]) -> int:
    """Restarts of ``max_restarts`` used, from the reasons of a run's attempts (oldest first, the
    last one the attempt that just ended): each later attempt that ran after a failure. Not
    counted: one after a preemption (``max_preemptions`` bounds those) or the cluster's own
    requeue (no restart of ours), and one whose start was cut off (the keeper killed mid-start):
    the attempt after it is that same restart, tried again. Beyond ``FREE_INTERRUPTED_STARTS``,
    cut-off starts count too, so a keeper killed at every start cannot restart a run forever."""
    used, interrupted, cause = 0, 0, ""
    for before, reason in zip(reasons, reasons[1:]):
        before, reason = before or "", reason or ""
        if not before.startswith(INTERRUPTED):
            cause = before   # what this restart (and its retries after a cut-off start) follows
        if reason.startswith(INTERRUPTED):
            interrupted += 1
        elif not cause.startswith((PREEMPTED, REQUEUED)):
            used += 1
    return used + max(0, interrupted - FREE_INTERRUPTED_STARTS)


def cut_off_phase(launcher: dict | None, *, kept: bool) -> str:
    """The phase a run whose start was cut off ends in (``RunState.launch_cut_off``): a kept
    run's restart goes back to ``restarting``, so its keeper (or a new one) starts the attempt
    again; any other start (launch, restore) ``failed``."""
    wanted = (launcher or {}).get(CUT_OFF)
    return "restarting" if kept and wanted == "restarting" else "failed"
