"""Hang diagnosis: where each worker is stuck, from its own Python stacks, kept with the run.

Every harness task writes all its threads' Python stacks when it gets SIGUSR1
(``harness/stackdump.py``); ``dump`` asks every host for its tasks' stacks at once through
hostctl's ``stacks``, and ``save`` keeps them in ``runs/<id>/stacks/<label>/<task>.txt``.
``stalled`` reads the metrics store: each worker's last step and when it was reported, so the
console can name the worker whose step stopped advancing before the stall timeout acts.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.hosts import remote
from backend.errors import ConsoleError
from backend.client.harness.contract import layout
from backend.hosts.pool import parallel
from backend.hosts.tasks import RunOnHosts, by_host

if TYPE_CHECKING:
    from backend.watch.metrics import MetricsStore

WAIT_S = 5.0
JOB_FRAME = re.compile(rf'File "[^"]*/{layout.JOB}/[^"]+", line \d+')


@dataclass(frozen=True)
class TaskStacks:
    task: str
    host: str
    text: str = ""        # faulthandler's dump: every thread, innermost frame first
    error: str = ""       # why there is no dump (not running, not a harness job, host down)

    @property
    def in_job_code(self) -> bool:
        """Stuck in the job module's own code rather than in TensorFlow's collectives."""
        return bool(JOB_FRAME.search(self.text))


def dump(run: RunOnHosts, *, wait_s: float = WAIT_S) -> list[TaskStacks]:
    """Every task's stacks, one hostctl call per host, all hosts at once."""
    groups = by_host(run.state.tasks, run.cluster)

    def one(group):
        return remote.stacks(group.host(run.pool), group.names, wait_s=wait_s)

    results = parallel(one, [(g.name, g) for g in groups])
    out = {}
    for group in groups:
        res = results[group.name]
        for t in group.tasks:
            if isinstance(res, Exception):
                out[t.name] = TaskStacks(t.name, t.host, error=str(res))
            else:
                got = res[t.name]
                out[t.name] = TaskStacks(t.name, t.host, got.get("stacks", ""), got.get("error", ""))
    return [out[t.name] for t in run.state.tasks]


def save(run: RunOnHosts, stacks: list[TaskStacks], *, label: str) -> Path:
    """Keep the dumps with the run: ``runs/<id>/stacks/<label>/<task>.txt``."""
    folder = run.local_dir / layout.STACKS / label
    folder.mkdir(parents=True, exist_ok=True)
    for s in stacks:
        (folder / f"{s.task}.txt").write_text(s.text or f"(no stacks: {s.error})\n")
    return folder


def dump_and_save(run: RunOnHosts, *, label: str | None = None) -> tuple[list[TaskStacks], Path | None]:
    """Dump and keep; never raises (the keeper calls it on its way to a restart)."""
    try:
        found = dump(run)
        return found, save(run, found, label=label or time.strftime("%Y%m%d-%H%M%S"))
    except (ConsoleError, OSError) as err:
        return [TaskStacks(t.name, t.host, error=str(err)) for t in run.state.tasks], None


@dataclass(frozen=True)
class WorkerProgress:
    task: str
    last_step: int
    last_time: float   # when the chief reported that step (the metrics line's time)


def progress(store: "MetricsStore") -> list[WorkerProgress]:
    """Each worker's last reported step and its time."""
    out = []
    for task in store.tasks():
        s = store.series(task)
        if len(s):
            out.append(WorkerProgress(task, int(s.step[-1]), float(s.time[-1])))
    return out


def stalled(workers: list[WorkerProgress]) -> list[WorkerProgress]:
    """The workers whose step stopped advancing first: the lowest last step, oldest report.

    The harness gathers every worker's row in one collective, so a hung worker usually holds
    the others at the same step: then all are named, and their stacks tell which one is stuck.
    """
    if not workers:
        return []
    low = min(w.last_step for w in workers)
    return [w for w in workers if w.last_step == low]


def stall_note(workers: list[WorkerProgress], *, now: float, stall_timeout_s: float,
               warn_after_s: float) -> str:
    """A line for the console once no step has advanced for ``warn_after_s``; "" before."""
    behind = stalled(workers)
    if not behind:
        return ""
    idle = now - max(w.last_time for w in behind)
    if idle < warn_after_s:
        return ""
    names = ", ".join(w.task for w in behind)
    left = stall_timeout_s - idle
    acts = (f"the stall timeout acts in {left:.0f} s" if left > 0 else "the stall timeout is due")
    return (f"No step since {idle:.0f} s: {names} stopped at step {behind[0].last_step} "
            f"({acts}). Press Dump stacks to see where each worker is.")
