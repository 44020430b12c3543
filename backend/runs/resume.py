"""Did a resumed attempt really resume? Only every worker can say so.

An attempt started from a checkpoint step (a Restore, or the keeper's restart from the latest)
counts as resumed only when every task confirmed the step it restored, in
RUN/tasks/<task>.resumed: the harness writes it, and so do ``tfconsole.checkpoints.restore``
and ``tfconsole.KerasCallback``. A command job's script that restores its own way
(``latest_checkpoint``) or not at all writes nothing, and used to be reported "started from step
S" while it trained from step 1. What a check found is kept on the attempt in the run's record
(``Attempt.resumed``, ``Attempt.first_step``), so status and Monitor read it with no host asked.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from backend.errors import ConsoleError
from backend.hosts import remote
from backend.records.state import Attempt, RunState

# What the script must do, said wherever an unconfirmed resume is reported.
RESUME_FIX = ("Its script must restore tfconsole.context().resume_step on every worker with "
              "tfconsole.checkpoints.restore(checkpoint, step) (tfconsole.KerasCallback does it "
              "for model.fit); see docs/job-contract.md, 'Resume'.")


@dataclass(frozen=True)
class Check:
    resumed: dict[str, int]      # task -> the step it confirmed restoring in this attempt
    first_step: int | None       # the chief's step in this attempt when it was looked at
    done: bool                   # nothing more can come: every task confirmed, one ended, or it trained


def look(run, tasks_left: list[str] | None = None, found: dict | None = None) -> Check:
    """One look at the hosts for the current attempt. Training that has begun (a metrics line of
    this attempt) settles it: a task writes its .resumed before its first step, which no worker
    finishes alone, so a task that has not written it by then never restored through tfconsole."""
    state = run.state
    found, ended = dict(found or {}), False
    names = [t.name for t in state.tasks]

    def ask() -> None:
        nonlocal ended
        for name in [n for n in (tasks_left or names) if n not in found]:
            answer = remote.resumed(run.remote(name), state.attempt, [name])
            found.update(answer["resumed"])
            ended = ended or any(n not in answer["resumed"] for n in answer["ended"])
    ask()
    if len(found) == len(names):
        return Check(found, None, True)
    step = run.last_step()
    if step is not None:
        ask()   # the first metrics line came after every honest task wrote its file
    return Check(found, step, step is not None or ended or len(found) == len(names))


def wait(run, wait_s: float, poll_s: float = 0.5) -> Check:
    """Look until the check is settled or ``wait_s`` passed (a job that reports no metrics)."""
    deadline, found = time.time() + wait_s, {}
    while True:
        check = look(run, found=found)
        found = check.resumed
        if check.done or time.time() > deadline:
            return check
        time.sleep(poll_s)


def record(run, number: int, check: Check) -> None:
    """Keep what ``check`` found on attempt ``number`` of the run's record."""
    def keep(state: RunState) -> None:
        for attempt in state.attempts:
            if attempt.number == number:
                attempt.resumed, attempt.first_step = dict(check.resumed), check.first_step
    run.update(keep)


def refresh(run) -> None:
    """Check the current attempt once if it resumed and nobody has checked it yet (the keeper's
    restarts): for status."""
    attempt = run.state.attempts[-1] if run.state.attempts else None
    if attempt is None or attempt.resume_step is None or attempt.resumed is not None:
        return
    try:
        check = look(run)
        if check.done:
            record(run, attempt.number, check)
    except ConsoleError:   # a host that does not answer, a record we may not write: unchecked
        pass


def confirmed(attempt: Attempt, tasks: list[str]) -> bool:
    return all((attempt.resumed or {}).get(t) == attempt.resume_step for t in tasks)


def warning(attempt: Attempt, tasks: list[str]) -> str | None:
    """The line that says an attempt is not confirmed as resumed from its step; None when it is,
    when it started from scratch, or while nobody has checked yet."""
    step = attempt.resume_step
    if step is None or attempt.resumed is None or confirmed(attempt, tasks):
        return None
    other = {t: s for t, s in attempt.resumed.items() if s != step and t in tasks}
    silent = [t for t in tasks if t not in attempt.resumed]
    said = [f"{', '.join(silent)} did not confirm restoring it"] if silent else []
    said += [f"{t} restored step {s} instead" for t, s in sorted(other.items())]
    seen = attempt.first_step
    if seen is not None and seen <= step:   # its steps count from the beginning again
        said.append(f"it trained from the beginning (step {seen} when checked)")
    elif seen is not None:
        said.append(f"it trained on (step {seen} when checked), maybe from another checkpoint")
    return (f"attempt {attempt.number} is not confirmed as resumed from step {step}: "
            f"{'; '.join(said)}. {RESUME_FIX}")


def warnings(state: RunState) -> list[str]:
    """Every attempt's warning, oldest first."""
    tasks = [t.name for t in state.tasks]
    return [w for a in state.attempts if (w := warning(a, tasks))]
