"""A run's record as every layer reads it: its phase, tasks and attempts (``RunState``), as
saved in ``runs/<id>/state.json``, and the checks a saved file must pass to be taken in.

Below the engines, the runs and the pages alike: an engine fills these in, ``RunStore``
(backend/runs/store.py) keeps them, and whoever shows a run reads them.
"""
from __future__ import annotations

import enum
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from backend.errors import RunError
from backend.client.harness.contract import layout

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")   # \Z: no trailing newline


class Phase(enum.StrEnum):
    LAUNCHING = "launching"     # an attempt's tasks are being started
    RUNNING = "running"
    QUEUED = "queued"           # handed to a scheduler that has not started it yet (Slurm pending)
    RESTARTING = "restarting"   # the keeper is between a failed attempt and the next
    STOPPING = "stopping"       # a stop did not reach every host: Stop stays available
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def live(self) -> bool:
        return self in (Phase.LAUNCHING, Phase.RUNNING, Phase.QUEUED, Phase.RESTARTING, Phase.STOPPING)


# An attempt whose tasks are handed over: running, or still queued by the scheduler. Both are
# watched and settled alike (a pending job can be cancelled or fail); only the display, Save now
# and the stall watch tell them apart. ``Run.status`` moves the phase between the two.
UNDERWAY = (Phase.RUNNING, Phase.QUEUED)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def check_run_id(run_id: str) -> str:
    """Refuse ids that could escape the runs folder (``../x``) or confuse a shell."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id) or ".." in run_id:
        raise RunError(f"run id {run_id!r} is not valid",
                       "Use letters, digits, '.', '_' and '-' only (see `python -m backend runs`).")
    return run_id



@dataclass
class TaskState:
    name: str
    position: int          # index into cluster.tasks
    host: str
    remote_run_dir: str    # relative to the remote home, or absolute; unique per launch
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None

    def __post_init__(self) -> None:
        # Every remote command takes the run folder from here; a state file written before
        # workdir was checked may hold "-c...", which must stay a path.
        self.remote_run_dir = layout.path_arg(self.remote_run_dir)


@dataclass
class Attempt:
    number: int
    started: float
    resume_step: int | None = None
    ended: float | None = None
    reason: str | None = None       # why it ended: finished, stopped, a task's failure
    last_step: int | None = None
    # Whether it really resumed from resume_step (backend/runs/resume.py): task -> the step each
    # task confirmed restoring (None: not checked yet), and the chief's step when checked.
    resumed: dict | None = None
    first_step: int | None = None
    # Where each task ran in this attempt (task -> host; backend/runs/membership.py moves a task
    # whose host is gone to a spare, so hosts differ between attempts), and the hosts this
    # attempt lost for good (host -> seconds it went unanswered), which the next attempt replaces.
    hosts: dict | None = None
    lost: dict | None = None
    # When its scheduler started the tasks it had held (Slurm pending), on the console's clock
    # (as read by the first reader that saw it running); None where nothing held them.
    dequeued: float | None = None


@dataclass
class RunState:
    run_id: str
    created: float
    cluster: dict
    job: dict
    tasks: list[TaskState]
    attempts: list[Attempt] = field(default_factory=list)
    phase: Phase = Phase.LAUNCHING
    unreachable: list[str] = field(default_factory=list)   # hosts a stop could not reach
    # The process starting the current attempt ({"pid", "host", "start"}, ``this_process``): a
    # reader that finds the run ``launching`` with that process gone knows the launch was cut off.
    launcher: dict | None = None
    # Who started it (``identity.Identity.as_dict``: name, via, host); None for a run from before.
    owner: dict | None = None
    # A sweep's trial ({"sweep", "trial", "params"}, backend/sweeps); None for a run of its own.
    sweep: dict | None = None

    @property
    def attempt(self) -> int:
        return self.attempts[-1].number if self.attempts else 0

    @property
    def live(self) -> bool:
        return Phase(self.phase).live

    @property
    def chief(self) -> TaskState:
        names = [t.name for t in self.tasks]
        return self.tasks[names.index("chief-0")] if "chief-0" in names else self.tasks[0]

    def launch_cut_off(self) -> str | None:
        """Why this run's launch can never finish (its launching process is gone), or None."""
        if self.phase != Phase.LAUNCHING or not self.launcher or process_alive(self.launcher):
            return None
        return f"launch interrupted: the launching process (pid {self.launcher.get('pid')}) is gone"

    def move(self, to: Phase, *, when: Iterable[Phase] | Callable[[RunState], bool],
             reason: str | None = None, last_step: int | None = None,
             unreachable: Iterable[str] | None = None) -> bool:
        """The one phase change (``RunStore.move`` calls it under the run's lock): to ``to``, only
        if the run is now in one of ``when`` (or ``when(state)`` holds), so whoever changed the
        phase first keeps it (a user's Stop wins over a keeper or a launch). ``reason`` also
        closes the current attempt (once: the first reason recorded stays). Whether it moved."""
        if not (when(self) if callable(when) else self.phase in tuple(when)):
            return False
        if reason is not None:
            self._close_attempt(reason, last_step)
        if unreachable is not None:
            self.unreachable = sorted(unreachable)
        self.phase = Phase(to)
        return True

    def _close_attempt(self, reason: str, last_step: int | None) -> None:
        current = self.attempts[-1] if self.attempts else None
        if current is not None and current.ended is None:
            current.ended, current.reason = time.time(), reason
            if last_step is not None:
                current.last_step = last_step


def _start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22): with the
    pid, it names one process, never a later one that reuses the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def this_process() -> dict:
    """This process, as ``RunState.launcher`` records it."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_ticks(os.getpid())}


def process_alive(info: dict) -> bool:
    """Whether the process ``this_process`` recorded still runs. On another host it cannot be
    told from here: it counts as alive (the run stays as it is)."""
    if info.get("host") != socket.gethostname():
        return True
    pid, start = info.get("pid"), info.get("start")
    return isinstance(pid, int) and start is not None and _start_ticks(pid) == start


# The type each saved field must have (None: may be null). A state file edited by hand or
# damaged is refused when it is read, naming the field, never taken in and left to break a
# reader later (a string `created` broke the sort of every run list; a null job, every page).
NUMBER = (int, float)
_RUN_TYPES = {"run_id": str, "created": NUMBER, "cluster": dict, "job": dict, "tasks": list,
              "attempts": list, "phase": str, "unreachable": list, "launcher": (dict, type(None)),
              "owner": (dict, type(None)), "sweep": (dict, type(None))}
_TASK_TYPES = {"name": str, "position": int, "host": str, "remote_run_dir": str,
               "pid": (int, type(None)), "pgid": (int, type(None)), "started": (*NUMBER, type(None))}
_ATTEMPT_TYPES = {"number": int, "started": NUMBER, "resume_step": (int, type(None)),
                  "ended": (*NUMBER, type(None)), "reason": (str, type(None)),
                  "last_step": (int, type(None)), "resumed": (dict, type(None)),
                  "first_step": (int, type(None)), "hosts": (dict, type(None)),
                  "lost": (dict, type(None)), "dequeued": (*NUMBER, type(None))}


def _checked(data: object, types: dict, where: str) -> dict:
    """``data`` as a dict whose known fields have their types (ValueError naming the first that
    does not); a missing or unknown field is left to the dataclass (TypeError)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'the file'} is {_kind(data)}, not a mapping")
    for key, kinds in types.items():
        value = data.get(key)
        if key in data and (not isinstance(value, kinds) or isinstance(value, bool)):
            wanted = dict.fromkeys(_kind(k) for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
            raise ValueError(f"{where}{key} is {_kind(value)}, not {' or '.join(wanted)}")
    return dict(data)


def _kind(value: object) -> str:
    """A JSON value's kind as a user reads it: 'null', 'a string', 'a number'..."""
    kind = value if isinstance(value, type) else type(value)
    return {type(None): "null", str: "a string", int: "a number", float: "a number", bool: "true/false",
            dict: "a mapping", list: "a list"}.get(kind, kind.__name__)


def from_json(data: object) -> RunState:
    data = _checked(data, _RUN_TYPES, "")
    data["tasks"] = [TaskState(**_checked(t, _TASK_TYPES, f"tasks[{i}]."))
                     for i, t in enumerate(data["tasks"])]
    data["attempts"] = [Attempt(**_checked(a, _ATTEMPT_TYPES, f"attempts[{i}]."))
                        for i, a in enumerate(data["attempts"])]
    data["phase"] = Phase(data.get("phase", Phase.LAUNCHING))
    return RunState(**data)
