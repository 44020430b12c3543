"""Restore: relaunch a run from a checkpoint step, as a new attempt. A step of a run's life (it
begins an attempt), built on the checkpoint actions of ``backend.checkpoints`` (list, hold, move
aside), which sit below run life.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from backend.checkpoints import (CHOICE_TTL_S, Hold, abandon_after, host_name, list_checkpoints, pin,
                                 release)
from backend.errors import ArtifactError
from backend.client.harness.contract import layout
from backend.hosts import remote
from backend.runs import detached, restorable, resume
from backend.runs.attempts import begin_attempt
from backend.runs.handle import Run
from backend.records.state import Phase
from backend.access import audit

RESUME_WAIT_S = 180      # a restored attempt's workers report their step once TensorFlow is up


@dataclass
class RestoreResult:
    step: int
    attempt: int
    resumed: dict[str, int] = field(default_factory=dict)    # task -> the step it restored
    moved_aside: dict[str, list[int]] = field(default_factory=dict)   # task -> newer steps
    warning: str | None = None    # set when not every worker confirmed resuming from ``step``

    @property
    def confirmed(self) -> bool:
        return self.warning is None

    @property
    def summary(self) -> str:
        if self.warning:
            return f"warning: {self.warning}"
        tasks = ", ".join(f"{t} from step {s}" for t, s in sorted(self.resumed.items()))
        return f"attempt {self.attempt} resumed: {tasks}"


@audit.recorded("restore", "step")
def restore(run: Run, step: int, *, hold: Hold | None = None, wait_s: float = RESUME_WAIT_S) -> RestoreResult:
    """Relaunch the job from checkpoint ``step`` on every worker, as a new attempt of this run.

    ``hold``: the caller already holds ``step`` (the console pins a step when the user picks it).
    Newer checkpoints move aside first, so no later restart or "latest" picks them.
    """
    own = hold is None
    hold = hold or pin(run, step, purpose="restore", ttl_s=CHOICE_TTL_S)
    try:
        if hold.step != step:
            raise ArtifactError(f"the hold is on step {hold.step}, not {step}", "Pick the step again.")
        listed = {c["step"]: c for c in list_checkpoints(run)}
        chosen = listed.get(step)
        if chosen is None:   # the hold expired and retention took the step (was a raw KeyError)
            raise ArtifactError(f"step {step} is no longer on the chief: its hold expired",
                                "Pick the checkpoint again, then press Restore.")
        # Before anything stops: a step TensorFlow cannot restore used to fail as a launch
        # failure, after the run was stopped, and use up an attempt.
        restorable.refuse_damaged(run, step, sorted(listed))
        if run.state.live:
            run.stop(reason=f"restore from step {step}")
        attempt = run.state.attempt + 1
        moved = {t.name: abandon_after(run, t.name, step, tag=f"attempt-{attempt}-restore-{step}", keep=hold)
                 for t in run.state.tasks}
        for t in run.state.tasks:
            if t.name != run.state.chief.name:
                _ensure_copy(run, t.name, chosen)
        begin_attempt(run, resume_step=step, expect=(Phase.STOPPED, Phase.FINISHED, Phase.FAILED),
                      by="restore")
        if run.watched:
            _rekeep(run)
        result = RestoreResult(step, run.state.attempt, moved_aside={t: s for t, s in moved.items() if s})
        # Resumed only if every worker says so in tasks/<task>.resumed (the harness, and a command
        # job's tfconsole.checkpoints.restore): a script may ignore the step and start over.
        check = resume.wait(run, wait_s)
        result.resumed = check.resumed
        if check.done:   # kept for status and Monitor; unsettled, status looks again later
            resume.record(run, result.attempt, check)
            result.warning = resume.warning(run.reload().attempts[-1], [t.name for t in run.state.tasks])
        else:
            result.warning = (f"attempt {result.attempt} has not confirmed resuming from step {step} on "
                              f"every worker within {wait_s:.0f} s (no metrics yet either); `status` "
                              f"checks again. {resume.RESUME_FIX}")
        return result
    finally:
        if own:
            release(run, hold)


def wait_resumed(run: Run, wait_s: float) -> dict[str, int]:
    """task -> step each task of the current attempt restored: once all did, one ended without
    restoring, it began training, or ``wait_s`` passed."""
    return resume.wait(run, wait_s).resumed


def _rekeep(run: Run) -> None:
    """A restored run is kept again like a launched one. The stop above ends the old keeper when
    it next polls, but under load it may poll only after the new attempt began, and then keep
    that one: the new keeper waits for it to exit, so the run always has exactly one keeper."""
    detached.start_keeper(run.run_id, run.store.root, run.pool.options, take_over=True)


def _ensure_copy(run: Run, task: str, chief_ckpt: dict) -> None:
    """Give a worker the chief's checkpoint files when it lacks that step (no shared storage)."""
    if any(c["step"] == chief_ckpt["step"] for c in list_checkpoints(run, task)):
        return
    chief = run.remote(run.state.chief.name)
    worker = run.remote(task)
    target = f"{layout.WORKER_CHECKPOINTS}/{task}"   # relative to the run directory
    with tempfile.TemporaryDirectory() as tmp:
        # meta.json last: the copy counts as complete only once everything else is there.
        for name in sorted(chief_ckpt["files"], key=lambda n: n.endswith(".meta.json")):
            local = str(Path(tmp) / host_name(name, run.task_spec(run.state.chief.name).host, "checkpoint file"))
            remote.fetch_file(chief, f"{layout.CHECKPOINTS}/{name}", local)
            remote.push_file(worker, local, f"{target}/{name}")

