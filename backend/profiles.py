"""A profile of every worker of a live run, on demand: the console's side.

``profile(run, steps)`` leaves a request for the chief; at the next sync point every worker starts
TensorFlow's profiler after the same step and stops it ``steps`` later (the job's side:
``backend/client/harness/profiling.py``, for harness jobs, fit scripts and custom loops alike).
Each worker writes its trace and a summary read from it: op time split into compute, collective
communication and input, and the top op types. This module waits for every task's summary,
copies each trace (at most ``MAX_COPY_BYTES`` a task) into ``runs/<id>/profile/step-S/<task>/``,
TensorBoard's logdir layout (``tfconsole tensorboard RUN`` serves ``runs/<id>/profile``), and
returns what each worker said. Checked against the roles file and recorded in the audit, as
Save now is. A profile never stops training: a profiler that did not start is said in the
task's ``error``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from backend.access import audit
from backend.checkpoints import Run, attempt_ended
from backend.client.harness.contract import profiling
from backend.errors import ConsoleError, RunError
from backend.hosts import remote

DEFAULT_STEPS = profiling.DEFAULT_STEPS
MAX_STEPS = profiling.MAX_STEPS
MAX_COPY_BYTES = 64 * 2**20   # one task's trace copied to the console at most
LOCAL = "profile"             # runs/<id>/profile/step-S/<task>.json and <task>/plugins/...


@dataclass
class Profile:
    """One profile: the window (steps after ``step``) and every task's summary, by task."""
    step: int
    steps: int
    folder: Path                      # on this machine: runs/<id>/profile/step-S
    tasks: dict = field(default_factory=dict)

    def lines(self) -> list[str]:
        """What a person reads: one line per task, the slowest split first."""
        out = [f"profile of steps {self.step + 1}-{self.step + self.steps}, traces in {self.folder}"]
        for task, s in self.tasks.items():
            out.append(f"  {task}: " + describe(s))
        return out


def per_step(summary: dict) -> dict | None:
    """A task's summary per step: ms per step, each part's share of the op time (compute,
    collective, input) and the top ops' ms per step; None where it has no profile."""
    if summary.get("error"):
        return None
    steps = max(1, int(summary.get("steps") or 1))
    parts = {k: float(summary.get(f"{k}_s") or 0.0) for k in ("compute", "collective", "input")}
    busy = sum(parts.values()) or 1.0
    return {"ms_per_step": 1000 * float(summary.get("seconds") or 0) / steps,
            "shares": {k: v / busy for k, v in parts.items()},
            "top": [(o["op"], 1000 * o["seconds"] / steps) for o in summary.get("top_ops", [])]}


def describe(summary: dict) -> str:
    """One task's summary in words: ms per step, the split, the top ops."""
    found = per_step(summary)
    if found is None:
        return f"no profile: {summary['error']}"
    split = ", ".join(f"{k} {100 * v:.0f} %" for k, v in found["shares"].items())
    top = ", ".join(f"{op} {ms:.2f} ms" for op, ms in found["top"][:4])
    return (f"{found['ms_per_step']:.1f} ms/step over {summary.get('steps')} steps; "
            f"op time {split}; top ops per step: {top or 'none'}")


@audit.recorded("profile", "steps")
def profile(run: Run, steps: int = DEFAULT_STEPS, *, wait_s: float = 180.0, say=print) -> Profile:
    """Profile every worker for ``steps`` steps from the next sync point; wait (``wait_s`` in
    all) for each task's summary and copy its trace here."""
    if not 1 <= int(steps) <= MAX_STEPS:
        raise RunError(f"steps is {steps}", f"Give 1 to {MAX_STEPS} steps: a trace grows with every step.")
    if not run.state.live or run.state.phase == "queued":
        raise RunError(f"run {run.run_id} is {run.state.phase}, not training",
                       "Profile a running job; start it first, or wait until its status says running.")
    chief = run.remote(run.state.chief.name)
    name = remote.request_profile(chief, int(steps))
    deadline, attempt = time.time() + wait_s, run.state.attempt
    say(f"asked every worker to profile {steps} steps from the next sync point")
    began = _wait(lambda: remote.profile_done(chief, name), run, attempt, deadline,
                  "no worker began the profile")
    if began.get("error"):
        raise RunError(f"no profile of run {run.run_id}: {began['error']}",
                       "Training goes on untouched; profile a harness job (docs/profiling.md).")
    folder = Path(run.local_dir) / LOCAL / Path(began["dir"]).name
    say(f"profiling steps {began['step'] + 1}-{began['step'] + began['steps']}")
    found = Profile(int(began["step"]), int(began["steps"]), folder)
    for task in run.state.tasks:
        rel = f"{began['dir']}/{task.name}.json"
        host = run.remote(task.name)
        summary = _wait(lambda: _summary(host, rel), run, attempt, deadline,
                        f"{task.name} wrote no profile summary")
        found.tasks[task.name] = _copy(host, summary, folder, task.name)
    return found


def _wait(look, run: Run, attempt: int, deadline: float, what: str):
    """``look()`` until it answers; a run that ended, or the deadline, is a RunError saying so."""
    looked = time.time()
    while True:
        answer = look()
        if answer is not None:
            return answer
        if time.time() > deadline:
            raise RunError(f"{what} in time", "The job may be stuck or between epochs; check its log.")
        if time.time() - looked >= 2.0:
            looked, ended = time.time(), attempt_ended(run, attempt, before="the profile was written")
            if ended is not None and look() is None:
                raise RunError(f"{what}: {ended}", "Profile again once the run trains.")
        time.sleep(0.5)


def _summary(host: remote.Host, rel: str) -> dict | None:
    data = remote.read_file(host, rel)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None   # being renamed in: whole on the next look


def _copy(host: remote.Host, summary: dict, folder: Path, task: str) -> dict:
    """The task's summary kept here, and its trace copied when it is small enough. The trace's
    path is the host's, relative to the run folder (``profile/step-S/<task>/plugins/...``): the
    copy keeps it, relative to the run's folder here."""
    folder.mkdir(parents=True, exist_ok=True)
    trace, size = summary.get("trace"), int(summary.get("trace_bytes") or 0)
    if trace and Path(trace).parts[:2] == (profiling.FOLDER, folder.name) and ".." not in Path(trace).parts:
        if size > MAX_COPY_BYTES:
            summary = {**summary, "copy_error": f"trace of {size} bytes is over {MAX_COPY_BYTES}: left on the host"}
        else:
            local = folder.parent.parent / trace
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                remote.fetch_file(host, trace, local)
                summary = {**summary, "copied": str(local)}
            except ConsoleError as err:
                summary = {**summary, "copy_error": err.problem}
    (folder / f"{task}.json").write_text(json.dumps(summary, indent=1))
    return summary


def latest(local_dir: Path) -> tuple[str, dict] | None:
    """The newest profile copied for a run (folder name, {task: summary}), or None."""
    root = Path(local_dir) / LOCAL
    folders = sorted((p for p in root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
    for folder in reversed(folders):
        tasks = {}
        for path in sorted(folder.glob("*.json")):
            try:
                tasks[path.stem] = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
        if tasks:
            return folder.name, tasks
    return None
