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
import errno
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

from backend.alerts import settings as alert_settings
from backend.errors import DiskFullError, RunError
from backend.client.harness import layout

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")   # \Z: no trailing newline
LOCK = "state.lock"
# The runs folder's own files, beside the run folders: no new run may take one's name (a run
# named webhook.json made the console's webhook file a folder, and every later launch failed).
# The login token (.console-token) starts with a dot, which RUN_ID never matches.
FOLDER_FILES = frozenset({alert_settings.CONSOLE_FILE})
FOLDER_FIX = "Make it writable by you, or choose another folder with --runs or $TFCONSOLE_RUNS."


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


def check_new_run_id(run_id: str) -> str:
    """``check_run_id``, and not the name of one of the runs folder's own files."""
    if check_run_id(run_id).lower() in FOLDER_FILES:
        raise RunError(f"run id {run_id!r} is the name of the runs folder's own file (the console's "
                       "webhook settings)", "Choose another name with --run-id.")
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
    # Whether it really resumed from resume_step (backend/runs/resume.py): task -> the step each
    # task confirmed restoring (None: not checked yet), and the chief's step when checked.
    resumed: dict | None = None
    first_step: int | None = None
    # Where each task ran in this attempt (task -> host; backend/runs/membership.py moves a task
    # whose host is gone to a spare, so hosts differ between attempts), and the hosts this
    # attempt lost for good (host -> seconds it went unanswered), which the next attempt replaces.
    hosts: dict | None = None
    lost: dict | None = None


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


# The type each saved field must have (None: may be null). A state file edited by hand or
# damaged is refused when it is read, naming the field, never taken in and left to break a
# reader later (a string `created` broke the sort of every run list; a null job, every page).
NUMBER = (int, float)
_RUN_TYPES = {"run_id": str, "created": NUMBER, "cluster": dict, "job": dict, "tasks": list,
              "attempts": list, "phase": str, "unreachable": list, "launcher": (dict, type(None))}
_TASK_TYPES = {"name": str, "position": int, "host": str, "remote_run_dir": str,
               "pid": (int, type(None)), "pgid": (int, type(None)), "started": (*NUMBER, type(None))}
_ATTEMPT_TYPES = {"number": int, "started": NUMBER, "resume_step": (int, type(None)),
                  "ended": (*NUMBER, type(None)), "reason": (str, type(None)),
                  "last_step": (int, type(None)), "resumed": (dict, type(None)),
                  "first_step": (int, type(None)), "hosts": (dict, type(None)),
                  "lost": (dict, type(None))}


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


def _from_json(data: object) -> RunState:
    data = _checked(data, _RUN_TYPES, "")
    data["tasks"] = [TaskState(**_checked(t, _TASK_TYPES, f"tasks[{i}]."))
                     for i, t in enumerate(data["tasks"])]
    data["attempts"] = [Attempt(**_checked(a, _ATTEMPT_TYPES, f"attempts[{i}]."))
                        for i, a in enumerate(data["attempts"])]
    data["phase"] = Phase(data.get("phase", Phase.LAUNCHING))
    return RunState(**data)


# A full disk or the user's quota: DiskFullError, never a bare OSError ("unexpected error").
FULL = (errno.ENOSPC, errno.EDQUOT)
# What a keeper needs free to record a step of its work (the state twice, a log line, an alert):
# with less, it waits (``room``) rather than start what it could not record.
ROOM_BYTES = 1 << 20


def room(folder: Path, need: int = ROOM_BYTES) -> DiskFullError | None:
    """The DiskFullError to say when ``folder``'s disk has less than ``need`` bytes or no inode
    free for us (root may use the blocks reserved for it), else None. Asked, not tried: no write."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None   # gone, or not ours: whoever writes there says so
    root = os.geteuid() == 0
    free = (fs.f_bfree if root else fs.f_bavail) * fs.f_frsize
    inodes = fs.f_ffree if root else fs.f_favail
    return DiskFullError(str(folder)) if free < need or (fs.f_files and not inodes) else None


@contextlib.contextmanager
def full_disk_named(folder: Path | str, to: str) -> Iterator[None]:
    """An ENOSPC or EDQUOT inside becomes DiskFullError naming ``folder`` and what failed."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as err:
        if err.errno in FULL:
            raise DiskFullError(str(folder), to=to) from None
        raise


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, readable by the owner only.

    A unique temporary name per writer (two writers never share one), fsync before the rename
    (a crash leaves the old file or the new one, never an empty one). A full disk leaves the old
    file whole and raises DiskFullError.
    """
    with full_disk_named(path.parent, f"write {path.name}"):
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


def read_dict(path: Path) -> dict:
    """A small JSON file of a run's folder as a dict; {} when it is missing or damaged."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class RunStore:
    """Runs under one root folder: create, load, list, and change under a lock."""

    def __init__(self, root: str | Path | None = None) -> None:
        # Absolute from the start: the record and the keeper (started in another folder) must name
        # the same files whatever folder the user ran `--runs myruns` from.
        self.root = Path(root).expanduser().resolve() if root else default_root()

    def path(self, run_id: str) -> Path:
        return self.root / check_run_id(run_id)

    def _require_folder(self) -> None:
        """A runs folder that is a file is refused by name (was NotADirectoryError: "a bug")."""
        if self.root.exists() and not self.root.is_dir():
            raise RunError(f"the runs folder {self.root} is a file, not a folder",
                           "Move that file away, or choose another folder with --runs or $TFCONSOLE_RUNS.")

    def require_writable(self, run_id: str | None = None) -> None:
        """Refuse, by name, a runs folder (or one run's folder) this process cannot write: a file,
        read-only, another user's. Asked before work that must record what it does: a launch
        before its preflight, a reader of a live run before it reaches the hosts. Tried, not
        judged from mode bits: root ignores them, and a read-only mount refuses what they allow."""
        self._require_folder()
        folder = self.path(run_id) if run_id else self.root
        try:
            if run_id is None:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)   # the runs folder: 0700
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            what = f"run {run_id}'s folder" if run_id else "the runs folder"
            raise RunError(f"{what} {folder} cannot be written ({err.strerror or err})",
                           "Make it writable (a read-only mount: remount it read-write), then run "
                           "the command again." if run_id else FOLDER_FIX) from None

    def require_new(self, run_id: str) -> str:
        """Everything a launch of ``run_id`` needs from this folder, checked before anything
        starts (its preflight): a valid id that no run or folder file has, a folder it can write.
        ``reserve`` still refuses a run that took the id meanwhile."""
        check_new_run_id(run_id)
        self.require_writable()
        if self.path(run_id).exists():
            raise RunError(f"run {run_id} already exists under {self.root}", "Choose another name with --run-id.")
        return run_id

    @contextlib.contextmanager
    def locked(self, run_id: str) -> Iterator[None]:
        """Hold the run's lock: one writer at a time, across processes."""
        folder = self.path(run_id)
        try:
            folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)   # the runs folder: 0700
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock = open(folder / LOCK, "a")
        except OSError as err:   # a read-only, full or foreign folder: ours to say, not "a bug"
            self._require_folder()
            if err.errno in FULL:
                raise DiskFullError(str(folder), to=f"record run {run_id}") from None
            raise RunError(f"run {run_id}'s record in {folder} cannot be written ({err.strerror or err})",
                           "Make the runs folder writable, then run the command again.") from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def reserve(self, run_id: str) -> Path:
        """Create a new run's folder; refuse an id that is taken. Its state is saved next."""
        folder = self.path(check_new_run_id(run_id))
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
        self._require_folder()
        try:
            state = _from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            raise RunError(f"no run {run_id!r} under {self.root}",
                           "List runs with `python -m backend runs`.") from None
        except (OSError, KeyError, TypeError, ValueError) as err:   # a folder, unreadable, bad JSON
            reason = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise RunError(f"run {run_id!r} has a damaged state file {path} ({reason})",
                           "Inspect it by hand; its logs are still in the same folder.") from None
        if state.run_id != run_id:   # its writes would go to another run's folder
            raise RunError(f"run {run_id!r} has a damaged state file {path} (it names run {state.run_id!r})",
                           "Inspect it by hand; its logs are still in the same folder.")
        return state

    def list(self) -> list[RunState]:
        return [s for s in self.list_all() if isinstance(s, RunState)]

    def list_all(self) -> list[RunState | RunError]:
        """Every run, newest (latest created) first, whatever its name: a run named ``fitjob`` is
        not newer than a later timestamped one. A damaged run appears as its RunError (dated by
        its state file), never hidden."""
        self._require_folder()
        try:
            folders = list(self.root.iterdir())
        except FileNotFoundError:
            return []
        except OSError as err:
            raise RunError(f"the runs folder {self.root} cannot be read ({err.strerror or err})", FOLDER_FIX) from None
        found: list[tuple[float, RunState | RunError]] = []
        for folder in folders:
            state_file = folder / layout.STATE
            try:
                if not (RUN_ID.match(folder.name) and state_file.exists()):
                    continue   # not a run, or one whose launch has not saved its state yet
                state = self.load(folder.name)
                found.append((state.created, state))
            except (RunError, OSError) as err:   # skipped, named, and the rest still listed
                found.append((_mtime(state_file), err if isinstance(err, RunError) else RunError(
                    f"run {folder.name!r} cannot be read ({err.strerror or err})", "Inspect its folder by hand.")))
        found.sort(key=lambda pair: pair[0], reverse=True)
        return [item for _, item in found]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
