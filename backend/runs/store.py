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
import fcntl
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable, Iterator

from backend.alerts import settings as alert_settings
from backend.errors import DiskFullError, RunError
from backend.client.harness.contract import layout
from backend.files import FULL, write_private
from backend.access import audit, roles, viewing
from backend.records.state import RUN_ID, Phase, RunState, check_run_id, from_json

LOCK = "state.lock"
# The runs folder's own files, beside the run folders: no new run may take one's name (a run
# named webhook.json made the console's webhook file a folder, and every later launch failed).
# The login token (.console-token) starts with a dot, which RUN_ID never matches.
FOLDER_FILES = frozenset({alert_settings.CONSOLE_FILE, audit.FILE, roles.FILE})
FOLDER_FIX = "Make it writable by you, or choose another folder with --runs or $TFCONSOLE_RUNS."


def default_root() -> Path:
    return Path(os.environ.get("TFCONSOLE_RUNS", "runs")).resolve()


def check_new_run_id(run_id: str) -> str:
    """``check_run_id``, and not the name of one of the runs folder's own files."""
    if check_run_id(run_id).lower() in FOLDER_FILES:
        raise RunError(f"run id {run_id!r} is the name of the runs folder's own file (the console's "
                       "webhook settings, the audit, the roles)", "Choose another name with --run-id.")
    return run_id


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
        """The run's state; AccessDenied first for a console's person with no role (viewing.py)."""
        self._require_folder()
        viewing.require(self.root)
        return self._load(run_id)

    def _load(self, run_id: str) -> RunState:
        path = self.path(run_id) / layout.STATE
        try:
            state = from_json(json.loads(path.read_text()))
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
        its state file), never hidden. AccessDenied for a console's person with no role."""
        self._require_folder()
        viewing.require(self.root)
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
                state = self._load(folder.name)
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
