"""The local run directory ``runs/<run-id>/`` and the run state persisted in it.

The state file holds everything a new process needs to reattach to a live run and stop it:
the cluster and job specs, each task's host, remote run directory and pids, and the attempts.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from backend.errors import RunError
from backend.harness import layout

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_root() -> Path:
    return Path(os.environ.get("TFCONSOLE_RUNS", "runs")).resolve()


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """Refuse ids that could escape the runs folder (``../x``) or confuse a shell."""
    if not RUN_ID.match(run_id) or ".." in run_id:
        raise RunError(f"run id {run_id!r} is not valid",
                       "Use letters, digits, '.', '_' and '-' only (see `python -m backend runs`).")
    return run_id


@dataclass
class TaskState:
    name: str
    position: int          # index into cluster.tasks
    host: str
    remote_run_dir: str    # relative to the remote home, or absolute
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None


@dataclass
class Attempt:
    number: int
    started: float
    resume_step: int | None = None
    ended: float | None = None
    reason: str | None = None       # why it ended: finished, stopped, a task's failure
    last_step: int | None = None


@dataclass
class RunState:
    run_id: str
    created: float
    cluster: dict
    job: dict
    tasks: list[TaskState]
    attempts: list[Attempt] = field(default_factory=list)
    phase: str = "launching"        # launching, running, restarting, finished, failed, stopped

    @property
    def attempt(self) -> int:
        return self.attempts[-1].number if self.attempts else 0

    @property
    def live(self) -> bool:
        return self.phase in ("launching", "running", "restarting")

    @property
    def chief(self) -> TaskState:
        names = [t.name for t in self.tasks]
        return self.tasks[names.index("chief-0")] if "chief-0" in names else self.tasks[0]


class RunStore:
    """Runs under one root folder: create, save, load, list."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root else default_root()

    def path(self, run_id: str) -> Path:
        return self.root / check_run_id(run_id)

    def save(self, state: RunState) -> None:
        folder = self.path(state.run_id)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (layout.STATE + ".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1))
        os.replace(tmp, folder / layout.STATE)  # readers never see half a state file

    def load(self, run_id: str) -> RunState:
        path = self.path(run_id) / layout.STATE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise RunError(f"no run {run_id!r} under {self.root}",
                           "List runs with `python -m backend runs`.") from None
        except json.JSONDecodeError:
            raise RunError(f"run {run_id!r} has a damaged state file {path}",
                           "Inspect it by hand; its logs are still in the same folder.") from None
        data["tasks"] = [TaskState(**t) for t in data["tasks"]]
        data["attempts"] = [Attempt(**a) for a in data["attempts"]]
        return RunState(**data)

    def list(self) -> list[RunState]:
        if not self.root.exists():
            return []
        states = []
        for folder in sorted(self.root.iterdir(), reverse=True):
            if (folder / layout.STATE).exists() and RUN_ID.match(folder.name):
                try:
                    states.append(self.load(folder.name))
                except RunError:
                    continue  # a damaged run must not hide the others
        return states
