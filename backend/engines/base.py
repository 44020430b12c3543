"""The engine protocol: what ``Run`` needs from whatever starts its tasks."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from backend.hosts.base import Transport
from backend.records.outcome import TaskStatus
from backend.records.state import RunState, TaskState
from backend.config.spec import ClusterSpec, JobSpec


class RunView(Protocol):
    """What an engine reads of a run; ``backend.runs.handle.Run`` is one (engines never import it)."""
    state: RunState
    cluster: ClusterSpec
    job: JobSpec

    @property
    def run_id(self) -> str: ...

    @property
    def local_dir(self) -> Path: ...

    def task(self, name: str) -> TaskState: ...


@dataclass
class Started:
    """What starting one task recorded: enough to find and stop its processes later."""
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None


@dataclass
class StopReport:
    """Per host: nothing left (absent), or the error that left something possibly alive."""
    errors: dict[str, Exception] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)   # hosts that did not answer at all
    killed: list[str] = field(default_factory=list)   # tasks that did not end on INT/TERM: KILLed
    found: list[str] = field(default_factory=list)    # tasks that still had processes to stop

    @property
    def clean(self) -> bool:
        return not self.errors


class Capabilities:
    """What an engine may do beyond the protocol, each answered by every engine (no probing with
    ``getattr``): the neutral answers here, an engine overrides what its cluster kind can do."""
    # Its tasks report the start's stages (pid file, READY, train.json) on their hosts.
    reports_start_stages = False

    def requeued(self, run: RunView):
        """The cluster ran the job again by itself (Slurm's requeue): what happened, or None."""
        return None

    def time_limit(self, record: dict | None) -> str | None:
        """The job's time limit when ``record`` (a preemption save) came on its warning."""
        return None

    def gpu_fan_out(self, run: RunView):
        """How the watch agent reaches the nodes' GPUs from the chief's host, or None (one agent
        per host, each over its own transport)."""
        return None


class Engine(Protocol):
    def begin(self, run: RunView, *, attempt: int, resume_step: int | None) -> dict[str, Started]:
        """Start every task of a new attempt, or raise (the caller stops what started)."""

    def status(self, run: RunView) -> list[TaskStatus]:
        """Each task's state; a host that does not answer gives ``unreachable``, never raises."""

    def stop(self, run: RunView, *, grace_s: float) -> StopReport:
        """Stop every task's processes and check that nothing is left."""

    def log_tail(self, run: RunView, task: str, max_bytes: int) -> str:
        """The end of a task's log (raises HostError when its host cannot be read)."""

    def chief_transport(self, run: RunView) -> Transport:
        """A transport to the chief's host: the watch agent, checkpoints and export run there."""

    # and everything in ``Capabilities``, which each engine inherits
