"""Begin an attempt: the one way tasks start, for launch, the keeper's restarts and restore.

All or nothing: if any task fails to start, the started ones are stopped and the attempt is
recorded as failed to start. The phase moves by compare-and-set under the run's lock, so a
user's Stop that lands while tasks are starting wins: the new tasks are stopped again.
"""
from __future__ import annotations

import time

from backend.errors import ConsoleError, MultiHostError, RunError
from backend.runs.handle import Run
from backend.records.outcome import CUT_OFF
from backend.records.state import Attempt, Phase, RunState, this_process

START_STOP_GRACE_S = 5.0


def begin_attempt(run: Run, *, resume_step: int | None, expect: tuple[Phase, ...],
                  on_fail: Phase = Phase.FAILED, by: str = "launch") -> int:
    """Start every task of a new attempt from ``resume_step``; return the attempt's number.

    ``expect``: the phases the run may be in (launch: launching; the keeper: restarting;
    restore: an ended phase). Raises RunError if it is in another, ConsoleError if a task
    does not start; the run is then ``on_fail`` (the keeper retries from ``restarting``), or
    ``stopping`` when a host could not be cleaned up. A user's Stop during the start raises
    RunError saying so, naming ``by`` (who started it: launch, restore, the keeper's restart).
    """
    number = []

    def open_attempt(state: RunState) -> None:
        number.append(state.attempt + 1)
        state.attempts.append(Attempt(number[0], time.time(), resume_step=resume_step,
                                      hosts={t.name: t.host for t in state.tasks}))
        # Who may leave it launching (RunState.launch_cut_off), and what a cut-off start becomes:
        # the keeper's restart resumes its policy (Run.settle), a launch or restore fails.
        state.launcher = {**this_process(), CUT_OFF: str(on_fail)}
    if not run.move(Phase.LAUNCHING, when=expect, unreachable=[], on_move=open_attempt):
        raise RunError(f"run {run.run_id} is {run.state.phase}, so no new attempt starts",
                       "Nothing to do; see `python -m backend status RUN`.")
    try:
        started = run.engine.begin(run, attempt=number[0], resume_step=resume_step)
    except BaseException as err:
        # Ctrl-C, an OSError while bundling, a bug: whatever cut the start off, the run must not
        # stay `launching` (every new session would take it for the live run), and what started
        # must not run on unwatched.
        reason = "failed to start" if isinstance(err, ConsoleError) else \
            f"launch interrupted: {type(err).__name__}: {err}".rstrip(": ")
        moved, clean = _abandon(run, reason, on_fail)
        if not moved and isinstance(err, ConsoleError) and run.state.phase in (Phase.STOPPING, Phase.STOPPED):
            # The user's Stop ended the tasks as they started (a worker killed in its imports):
            # that, not the import traceback it left, is what happened.
            raise _stopped(run, by, clean) from None
        raise

    def record_pids(state: RunState) -> None:   # kept even if the run was stopped: stop reads them
        for t in state.tasks:
            if t.name in started:
                got = started[t.name]
                t.pid, t.pgid, t.started = got.pid, got.pgid, got.started
    if not run.move(Phase.RUNNING, when=(Phase.LAUNCHING,), before=record_pids):
        # someone stopped the run while its tasks were starting: theirs is the last word. A stop
        # already over leaves the record alone (Run.stop on an ended run does nothing), but may
        # have missed the tasks started since: stop those without touching the record.
        if run.state.live:
            run.stop(grace_s=START_STOP_GRACE_S, reason="stopped while starting")
        else:
            report = run.stop_attempt(grace_s=START_STOP_GRACE_S)
            if not report.clean:
                raise MultiHostError("stop", report.errors, "Those hosts may still run a task of this "
                                     "run started as it was stopped: end it there when they answer.")
        raise _stopped(run, by, clean=True)
    return number[0]


def _stopped(run: Run, by: str, clean: bool) -> RunError:
    return RunError(f"run {run.run_id} was stopped while the {by} started it",
                    "Nothing is left running; start it again if that was not meant." if clean else
                    "Its stop says what it left: see `python -m backend status RUN`.")


def _abandon(run: Run, reason: str, on_fail: Phase) -> tuple[bool, bool]:
    """Stop what started of a failed start and record it; a second Ctrl-C here still records.
    Whether the record moved (not when someone stopped the run meanwhile), and the stop was clean."""
    clean, errors = False, {}
    try:
        report = run.stop_attempt(grace_s=START_STOP_GRACE_S)
        clean, errors = report.clean, report.errors
    except BaseException:   # noqa: BLE001 - the record below matters more than this stop
        pass
    moved = run.move(on_fail if clean else Phase.STOPPING, when=(Phase.LAUNCHING,), reason=reason,
                     unreachable=errors)
    return moved, clean
