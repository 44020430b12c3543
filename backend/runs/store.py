"""The local run directory ``runs/<run-id>/`` and the run state persisted in it: its one owner.

The state file holds everything a new process needs to reattach to a live run and stop it:
the cluster and job specs, each task's host, remote run directory and pids, and the attempts.
Several processes write it (the console, the CLI, a keeper), so every change is a
read-modify-write under a per-run lock (``RunStore.update``), written to a unique temporary file,
fsynced and renamed: a reader never sees half a file and no writer loses another's change.
The file holds the job's environment, which may carry secrets: it is readable by its owner only.
"""
from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import re
import secrets
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from backend.errors import RunError
from backend.harness import layout

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")   # \Z: no trailing newline
LOCK = "state.lock"


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


def default_root() -> Path:
    return Path(os.environ.get("TFCONSOLE_RUNS", "runs")).resolve()


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
        # workdir was checked may hold "-c...", which must stay a path (issue 27).
        self.remote_run_dir = layout.path_arg(self.remote_run_dir)


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
    phase: Phase = Phase.LAUNCHING
    unreachable: list[str] = field(default_factory=list)   # hosts a stop could not reach
    # The process starting the current attempt ({"pid", "host", "start"}, ``this_process``): a
    # reader that finds the run ``launching`` with that process gone knows the launch was cut off.
    launcher: dict | None = None

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


def _from_json(data: dict) -> RunState:
    data = dict(data)
    data["tasks"] = [TaskState(**t) for t in data["tasks"]]
    data["attempts"] = [Attempt(**a) for a in data["attempts"]]
    data["phase"] = Phase(data.get("phase", Phase.LAUNCHING))
    return RunState(**data)


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, readable by the owner only.

    A unique temporary name per writer (two writers never share one), fsync before the rename
    (a crash leaves the old file or the new one, never an empty one).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:   # mkstemp creates the file 0600
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class RunStore:
    """Runs under one root folder: create, load, list, and change under a lock."""

    def __init__(self, root: str | Path | None = None) -> None:
        # Absolute from the start: the record and the keeper (started in another folder) must name
        # the same files whatever folder the user ran `--runs myruns` from.
        self.root = Path(root).expanduser().resolve() if root else default_root()

    def path(self, run_id: str) -> Path:
        return self.root / check_run_id(run_id)

    @contextlib.contextmanager
    def locked(self, run_id: str) -> Iterator[None]:
        """Hold the run's lock: one writer at a time, across processes."""
        folder = self.path(run_id)
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)   # the runs folder: 0700
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder / LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def reserve(self, run_id: str) -> Path:
        """Create a new run's folder; refuse an id that is taken. Its state is saved next."""
        folder = self.path(run_id)
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)   # the runs folder: 0700
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            raise RunError(f"run {run_id} already exists", "Choose another run id.") from None
        return folder

    def update(self, run_id: str, change: Callable[[RunState], object]) -> RunState:
        """Load, apply ``change`` and save, all under the run's lock; return the new state."""
        with self.locked(run_id):
            state = self.load(run_id)
            change(state)
            self._write(state)
            return state

    def move(self, run_id: str, to: Phase, *, when: Iterable[Phase] | Callable[[RunState], bool],
             reason: str | None = None, last_step: int | None = None,
             unreachable: Iterable[str] | None = None,
             before: Callable[[RunState], object] | None = None,
             on_move: Callable[[RunState], object] | None = None) -> tuple[RunState, bool]:
        """Move the run's phase under its lock (``RunState.move``: a compare-and-set); every
        writer of a phase comes through here. ``before``: a change made in the same write whether
        the phase moves or not; ``on_move``: one made only if it moved. Returns the new state
        and whether it moved."""
        moved = []

        def change(state: RunState) -> None:
            if before is not None:
                before(state)
            if state.move(to, when=when, reason=reason, last_step=last_step, unreachable=unreachable):
                moved.append(True)
                if on_move is not None:
                    on_move(state)
        return self.update(run_id, change), bool(moved)

    def save(self, state: RunState) -> None:
        """Replace the whole state (under the lock). Prefer ``update`` for changes."""
        with self.locked(state.run_id):
            self._write(state)

    def _write(self, state: RunState) -> None:
        write_private(self.path(state.run_id) / layout.STATE, json.dumps(asdict(state), indent=1))

    def load(self, run_id: str) -> RunState:
        path = self.path(run_id) / layout.STATE
        try:
            return _from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise RunError(f"no run {run_id!r} under {self.root}",
                           "List runs with `python -m backend runs`.") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise RunError(f"run {run_id!r} has a damaged state file {path} ({err})",
                           "Inspect it by hand; its logs are still in the same folder.") from None

    def list(self) -> list[RunState]:
        return [s for s in self.list_all() if isinstance(s, RunState)]

    def list_all(self) -> list[RunState | RunError]:
        """Every run, newest (latest created) first, whatever its name: a run named ``fitjob`` is
        not newer than a later timestamped one. A damaged run appears as its RunError (dated by
        its state file), never hidden."""
        if not self.root.exists():
            return []
        found: list[tuple[float, RunState | RunError]] = []
        for folder in self.root.iterdir():
            state_file = folder / layout.STATE
            if state_file.exists() and RUN_ID.match(folder.name):
                try:
                    state = self.load(folder.name)
                    found.append((state.created, state))
                except RunError as err:
                    found.append((_mtime(state_file), err))
        found.sort(key=lambda pair: pair[0], reverse=True)
        return [item for _, item in found]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
