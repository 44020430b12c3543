"""Resume only from a checkpoint TensorFlow can restore: checked before a step is chosen.

A checkpoint counts as complete (``ckpt_index``) once its index and meta files are there, so one
whose ``.data`` file was cut short (a full disk, a copy cut off) is still listed. The keeper used
to resume every restart from it, each attempt failed at its restore, and the run ended ``failed``
with older good checkpoints on disk; a restore of it failed late, as a launch failure. Each task
restores from its own folder, so each task's host reads its own files (``checkpoints.verify``:
export.py's check, TensorFlow's checkpoint reader over every tensor, no model built), and says
why in the words export uses for a checkpoint it cannot restore.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from backend import checkpoints
from backend.errors import ArtifactError, ConsoleError
from backend.hosts.pool import failures, parallel
from backend.runs.handle import Run


@dataclass
class Choice:
    step: int | None                                   # None: no step reads whole anywhere
    damaged: dict[str, dict[int, str]] = field(default_factory=dict)   # task -> step -> why


def newest_common(run: Run) -> Choice:
    """The newest step that every task holds complete AND reads whole; the damaged steps met on
    the way, by task. Usually one check per task, all tasks at once."""
    tasks = [t.name for t in run.state.tasks]
    held = [{c["step"] for c in checkpoints.list_checkpoints(run, t)} for t in tasks]
    common = sorted(set.intersection(*held), reverse=True) if held else []
    good: dict[str, set[int]] = {t: set() for t in tasks}
    choice = Choice(None)
    while common:
        need = [t for t in tasks if common[0] not in good[t]]
        if not need:
            break
        for task, (found, bad) in _verify_each(run, {t: common for t in need}).items():
            good[task] |= set() if found is None else {found}
            choice.damaged.setdefault(task, {}).update(bad)
        dropped = {s for bad in choice.damaged.values() for s in bad}
        common = [s for s in common if s not in dropped]   # a task's first good one is now on top
    choice.step = common[0] if common else None
    choice.damaged = {t: bad for t, bad in choice.damaged.items() if bad}
    return choice


def resume_step(run: Run, log) -> int | None:
    """The keeper's step for the next attempt: ``newest_common``. A damaged checkpoint met on the
    way is moved aside (kept) and named in the ended attempt's reason, so failure.log and the
    restart's alert say it; a retry of this start finds it gone and adds nothing."""
    began = time.time()
    choice = newest_common(run)
    log(f"newest step every task holds and reads whole: {choice.step} (checked in {time.time() - began:.1f} s)")
    if choice.damaged:
        kept = set_aside(run, choice, f"attempt-{run.state.attempt + 1}-unrestorable")
        text = damaged_text(choice, kept)
        log(f"not resuming from a damaged checkpoint: {text}")

        def name_it(state) -> None:
            state.attempts[-1].reason = f"{state.attempts[-1].reason or 'failed'}; {text}"
        run.update(name_it)
    return choice.step


def refuse_damaged(run: Run, step: int, listed: list[int]) -> None:
    """Before a restore stops or starts anything: ArtifactError in export's words when a task's
    copy of ``step`` cannot be restored. Tasks that lack the step get the chief's copy."""
    chief = run.state.chief.name
    older = sorted((s for s in listed if s < step), reverse=True)

    def steps_of(task: str) -> list[int]:
        if task == chief:
            return [step, *older]
        mine = {c["step"] for c in checkpoints.list_checkpoints(run, task)}
        return [step, *(s for s in older if s in mine)] if step in mine else []
    asked = {t.name: steps_of(t.name) for t in run.state.tasks}
    for task, (good, bad) in _verify_each(run, {t: s for t, s in asked.items() if s}).items():
        if step in bad:
            whose = "" if task == chief else f"{task}'s copy: "
            raise ArtifactError(f"{whose}{bad[step]}.", (f"Restore from step {good} instead" if good is not None
                                else "No older step reads whole: launch the run again")
                                + "; nothing was stopped or started.")


def set_aside(run: Run, choice: Choice, tag: str) -> str:
    """Move each damaged checkpoint aside (with whatever is newer than the chosen step in that
    task's folder: it is kept, never deleted, and nothing resumes from it); how the reason says it."""
    after, said = choice.step or 0, []
    for task in sorted(choice.damaged):
        folder = f"{checkpoints.checkpoint_dir(run, task)}/abandoned/{tag}/"
        try:
            moved = checkpoints.abandon_after(run, task, after, tag=tag, keep=None)
            said.append(f"step(s) {', '.join(map(str, moved))} of {task} kept in {folder}")
        except ConsoleError as err:   # held by a running export: left in place, named, never chosen
            said.append(f"{task}'s left in place ({err.problem})")
    return "; ".join(said)


def damaged_text(choice: Choice, kept: str) -> str:
    """What the attempt's reason and the restart's alert add: each damaged checkpoint in export's
    words, where it is kept, and where the next attempt starts."""
    found = [f"on {task}: {why}" for task, bad in sorted(choice.damaged.items())
             for _, why in sorted(bad.items(), reverse=True)]
    start = f"step {choice.step}" if choice.step is not None else "scratch"
    return f"{'; '.join(found)}; moved aside ({kept}); resuming from {start}"


def _verify_each(run: Run, asked: dict[str, list[int]]) -> dict[str, tuple[int | None, dict[int, str]]]:
    answers = parallel(lambda item: checkpoints.verify(run, *item), [(t, (t, s)) for t, s in asked.items()])
    errors = failures(answers)
    if errors:
        raise next(iter(errors.values()))
    return answers
