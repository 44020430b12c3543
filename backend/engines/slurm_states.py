"""Slurm's view of a job, read back: ``scontrol show job -o`` and ``squeue`` output parsed, and
mapped onto the phases the rest of the console knows (pure).

Without an accounting daemon ``sacct`` knows nothing, so state comes from ``scontrol`` (which
keeps a finished job for ``MinJobAge`` seconds, 300 by default) and ``squeue`` (live jobs only);
after that, the exit codes each task wrote into the run folder tell how it ended.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace

from backend.diagnosis import diagnose
from backend.client.harness.contract import preempt
from backend.records.outcome import TaskPhase, TaskStatus

_PAIR = re.compile(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|\s*$)")


class SlurmPhase(enum.StrEnum):
    PENDING = "pending"        # queued: Slurm's reason says why (Resources, Priority, ...)
    RUNNING = "running"
    COMPLETING = "completing"  # ended; Slurm is still ending the tasks' processes
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    OUT_OF_MEMORY = "out_of_memory"

    @property
    def ended(self) -> bool:
        return self not in (SlurmPhase.PENDING, SlurmPhase.RUNNING, SlurmPhase.COMPLETING)


_STATES = {
    "PENDING": SlurmPhase.PENDING, "REQUEUED": SlurmPhase.PENDING, "REQUEUE_HOLD": SlurmPhase.PENDING,
    "REQUEUE_FED": SlurmPhase.PENDING, "CONFIGURING": SlurmPhase.PENDING,
    "RUNNING": SlurmPhase.RUNNING, "SUSPENDED": SlurmPhase.RUNNING, "STOPPED": SlurmPhase.RUNNING,
    "RESIZING": SlurmPhase.RUNNING, "SIGNALING": SlurmPhase.RUNNING, "STAGE_OUT": SlurmPhase.COMPLETING,
    "COMPLETING": SlurmPhase.COMPLETING, "COMPLETED": SlurmPhase.COMPLETED,
    "FAILED": SlurmPhase.FAILED, "BOOT_FAIL": SlurmPhase.NODE_FAIL, "DEADLINE": SlurmPhase.TIMEOUT,
    "SPECIAL_EXIT": SlurmPhase.FAILED, "REVOKED": SlurmPhase.CANCELLED,
    "CANCELLED": SlurmPhase.CANCELLED, "TIMEOUT": SlurmPhase.TIMEOUT, "NODE_FAIL": SlurmPhase.NODE_FAIL,
    "PREEMPTED": SlurmPhase.PREEMPTED, "OUT_OF_MEMORY": SlurmPhase.OUT_OF_MEMORY,
}

# What each way of ending means to the operator, and what to do (the reason a run shows).
_EXPLAIN = {
    SlurmPhase.TIMEOUT: "timeout: the job reached its time limit ({limit}). Raise time_limit in the "
                        "cluster file; a restart resumes from the newest checkpoint.",
    SlurmPhase.CANCELLED: "cancelled (scancel, or an administrator). Launch or restore it again if that "
                          "was not meant.",
    SlurmPhase.NODE_FAIL: "node_fail: a node of the job failed ({nodes}). Restart it; Slurm avoids a "
                          "node that is down.",
    SlurmPhase.PREEMPTED: "preempted by a job with higher priority. Restart it, or ask for a QoS that "
                          "is not preemptible.",
    SlurmPhase.OUT_OF_MEMORY: "out_of_memory: a task went over its memory limit. Ask for more "
                              "(extra: {{mem: ...}}) or use a smaller batch.",
}


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str                 # Slurm's own word: PENDING, RUNNING, TIMEOUT, ...
    reason: str = ""           # why it waits or ended (Resources, Priority, NonZeroExitCode, ...)
    exit_code: int = 0
    signal: int = 0
    nodes: str = ""
    time_limit: str = ""
    position: int = 0          # while pending: its place among its partition's waiting jobs (1 = next)
    waiting: int = 0           # how many wait there, itself included (0: not known)
    restarts: int = 0          # how often Slurm has requeued it (scontrol's Restarts)

    @property
    def phase(self) -> SlurmPhase:
        return _STATES.get(self.state, SlurmPhase.FAILED)

    @property
    def queue(self) -> str:
        """While pending: Slurm's reason and the job's place, ``Resources, 1st of 2 waiting``."""
        if self.phase != SlurmPhase.PENDING:
            return ""
        parts = [self.reason] if self.reason and self.reason != "None" else []
        if self.position and self.waiting:
            parts.append(f"{_ordinal(self.position)} of {self.waiting} waiting")
        return ", ".join(parts)

    @property
    def label(self) -> str:
        """What a status line shows: ``pending (Resources)``, ``timeout``, ``running``."""
        if self.phase == SlurmPhase.PENDING and self.reason and self.reason != "None":
            return f"pending ({self.reason})"
        return str(self.phase)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def with_place(job: JobInfo | None, queue: list[str] | None) -> JobInfo | None:
    """The job with its place in ``queue`` (pending job ids in Slurm's order), when it is there."""
    if job is None or not queue or job.job_id not in queue:
        return job
    return replace(job, position=queue.index(job.job_id) + 1, waiting=len(queue))


def scontrol_fields(text: str) -> dict[str, str]:
    """``scontrol show job -o ID``'s Key=Value pairs ({} when no job is shown)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("JobId=")), None)
    return dict(_PAIR.findall(line)) if line else {}


def parse_scontrol(text: str) -> JobInfo | None:
    """``scontrol show job -o ID``: one line of Key=Value pairs. None when no job is shown."""
    pairs = scontrol_fields(text)
    if not pairs:
        return None
    state = pairs.get("JobState", "")
    code, _, sig = pairs.get("ExitCode", "0:0").partition(":")
    nodes, restarts = pairs.get("NodeList", ""), pairs.get("Restarts", "0")
    return JobInfo(pairs.get("JobId", ""), state, pairs.get("Reason", ""),
                   int(code) if code.isdigit() else 0, int(sig) if sig.isdigit() else 0,
                   "" if nodes == "(null)" else nodes, pairs.get("TimeLimit", ""),
                   restarts=int(restarts) if restarts.isdigit() else 0)


SQUEUE_FORMAT = "%i|%T|%r|%N|%l"   # job id, state, reason, nodes, time limit


def parse_squeue(text: str) -> JobInfo | None:
    """``squeue -h -j ID -o '%i|%T|%r|%N|%l'``; None when the job has left the queue."""
    line = next((ln for ln in text.splitlines() if ln.count("|") == 4), None)
    if line is None:
        return None
    job_id, state, reason, nodes, limit = (part.strip() for part in line.split("|"))
    return JobInfo(job_id, state, reason, nodes=nodes, time_limit=limit)


def explain(job: JobInfo) -> str | None:
    """Why the job ended or waits, in plain words ending with what to do; None when running or fine."""
    if job.phase == SlurmPhase.PENDING:
        why = f" ({job.queue})" if job.queue else ""
        return (f"Slurm job {job.job_id} is queued{why}: it starts when Slurm gives it its nodes. "
                "Stop cancels it at once.")
    text = _EXPLAIN.get(job.phase)
    return f"Slurm job {job.job_id} " + text.format(limit=job.time_limit, nodes=job.nodes) if text else None


def task_statuses(job: JobInfo | None, tasks: dict[str, dict], names: list[str]) -> list[TaskStatus]:
    """Each task's status from the job's state and the files each task wrote.

    ``tasks`` maps name -> ``{"info": {...node, pid} or None, "exit": code or None}``. A task
    that wrote its exit code has ended, whatever the job does; otherwise the job's phase speaks.
    """
    out = []
    for name in names:
        files = tasks.get(name) or {}
        info, code = files.get("info") or {}, files.get("exit")
        host = info.get("node") or (job.nodes if job else "") or "slurm"
        out.append(_one(name, host, job, info, code))
        if out[-1].succeeded:
            out[-1].ended_ago_s = files.get("ended_ago_s")
    # srun's --kill-on-bad-exit ends the peers of a failed task before they write a code: they
    # are casualties, so the run's reason names the task that failed first.
    own = {n for n in names if (tasks.get(n) or {}).get("exit") not in (None, 0)}
    if job is not None and job.phase == SlurmPhase.FAILED and own:
        for s in out:
            if s.name not in own and s.failed:
                s.diagnosis = diagnose.PEER_DIED
    return out


def _job_code(job: JobInfo) -> int:
    """The job's exit code as a shell reports it (128 + signal when a signal ended it)."""
    if job.exit_code:
        return job.exit_code
    return 128 + job.signal if job.signal else 1


def _one(name: str, host: str, job: JobInfo | None, info: dict, code: int | None) -> TaskStatus:
    if job is None:   # gone from Slurm's memory: the files are all we have
        return TaskStatus(name, host, TaskPhase.LOST if code is None else TaskPhase.EXITED, code)
    phase = job.phase
    if phase == SlurmPhase.PENDING:
        return TaskStatus(name, host, TaskPhase.QUEUED, diagnosis=explain(job), queue=job.queue)
    if code == 0:   # its own exit file: it ended well, whatever ends (or ended) the job after it
        return TaskStatus(name, host, TaskPhase.EXITED, code)
    if not phase.ended:
        # A task that failed while the job lives: Slurm's verdict (timeout, node failure, a
        # cancel) comes seconds later and says more than the code, so wait for it. The step's
        # --kill-on-bad-exit ends the job soon after one task fails.
        return TaskStatus(name, host, TaskPhase.RUNNING if info else TaskPhase.STARTING)
    if code is None:   # killed with the job before it could write its code
        code = 0 if phase == SlurmPhase.COMPLETED else _job_code(job)
    if code == preempt.EXIT_CODE:   # saved its step on the signal: no failure, nothing to explain
        return TaskStatus(name, host, TaskPhase.EXITED, code)
    if phase == SlurmPhase.COMPLETED:
        return TaskStatus(name, host, TaskPhase.EXITED, code)
    return TaskStatus(name, host, TaskPhase.EXITED, code if code else 1, diagnosis=explain(job),
                      cancelled=phase == SlurmPhase.CANCELLED)
