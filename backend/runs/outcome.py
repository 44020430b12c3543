"""How a run's tasks stand, and the one function that decides whether an attempt has ended.

Pure: no I/O. ``Run.settle`` (any reader: the CLI, the console, ``Run.wait``) and the keeper
both decide through ``conclude``, so every reader agrees on how a run ended.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from backend.diagnosis import diagnose


class TaskPhase(enum.StrEnum):
    STARTING = "starting"        # the supervisor runs but has not recorded the task's pid yet
    RUNNING = "running"
    EXITED = "exited"            # with an exit code
    LOST = "lost"                # no process and no recorded exit code
    UNREACHABLE = "unreachable"  # its host did not answer: unknown, not failed
    PENDING = "pending"          # a scheduler has not started it yet (Slurm)


@dataclass
class TaskStatus:
    name: str
    host: str
    state: TaskPhase
    exit_code: int | None = None
    diagnosis: str | None = None

    @property
    def label(self) -> str:
        return f"exited({self.exit_code})" if self.state == TaskPhase.EXITED else str(self.state)

    @property
    def failed(self) -> bool:
        return self.state == TaskPhase.LOST or (self.state == TaskPhase.EXITED and self.exit_code != 0)

    @property
    def succeeded(self) -> bool:
        return self.state == TaskPhase.EXITED and self.exit_code == 0


class Verdict(enum.StrEnum):
    GOING = "going"          # tasks run (or start); nothing failed
    FINISHED = "finished"    # every task exited 0
    FAILED = "failed"        # a task exited non-zero or vanished: the attempt cannot succeed
    UNKNOWN = "unknown"      # nothing failed that we can see, but a host did not answer


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
    ended = all(s.state in (TaskPhase.EXITED, TaskPhase.LOST) for s in statuses)
    bad = [s for s in statuses if s.failed]
    if bad:
        casualties = all(s.diagnosis == diagnose.PEER_DIED for s in bad) and not ended
        return Conclusion(Verdict.FAILED, failure_reason(bad), unreachable, ended, casualties)
    if unreachable:
        return Conclusion(Verdict.UNKNOWN, "no answer from " + ", ".join(
            f"{s.name} ({s.host})" for s in statuses if s.state == TaskPhase.UNREACHABLE), unreachable)
    if ended:
        return Conclusion(Verdict.FINISHED, "finished", (), True)
    return Conclusion(Verdict.GOING)


def failure_reason(bad: list[TaskStatus]) -> str:
    # A failure no restart can cure names the attempt (the keeper then gives up at once); else the
    # first real failure, not a peer whose collective it aborted.
    first = sorted(bad, key=lambda s: (not diagnose.permanent(s.diagnosis or ""),
                                       s.diagnosis == diagnose.PEER_DIED))[0]
    detail = first.diagnosis if first.diagnosis and first.diagnosis != diagnose.PEER_DIED else ""
    return f"{first.name} {first.label}" + (f": {detail[:300]}" if detail else "")
