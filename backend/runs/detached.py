"""The keeper as a process: start it detached, find it, restart it when it has died.

Plain values in (a run id, the runs folder, SSH options): this module imports nothing of runs'
logic, so launch, restore and any reader can start a keeper without an import circle.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # a type only: the keeper's pid is read by commands that never open SSH
    from backend.hosts.ssh import SSHOptions

POLL_S = 1.0            # detection delay vs. CPU: one status command per host per poll
KEEPER_LOG = "keeper.log"
FAILURE_LOG = "failure.log"   # the keeper's account of the last failure; status prints its tail
KEEPER_PID = "keeper.pid"
KEEPER_LOCK = "keeper.lock"
REPO_ROOT = Path(__file__).resolve().parents[2]


def keeper_pid(local_dir: Path) -> int | None:
    """The pid of the run's live keeper, or None. The pid file names it; where that names no live
    keeper (a full disk kept the keeper from writing it), the holder of the keeper's lock is it."""
    try:
        named = int((local_dir / KEEPER_PID).read_text().strip())
    except (FileNotFoundError, ValueError):
        named = None
    if named is not None and _is_keeper(named, local_dir):
        return named
    holder = lock_holder(local_dir / KEEPER_LOCK)
    return holder if holder is not None and _is_keeper(holder, local_dir) else None


def lock_holder(path: Path) -> int | None:
    """The process holding a flock on ``path`` (from /proc/locks), or None; read, never taken:
    trying the lock would make a keeper starting at that moment take it for another's."""
    try:
        st = path.stat()
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        fields = line.split()   # "1: FLOCK ADVISORY WRITE 1234 00:2f:5678 0 EOF"; waiters have "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == me and fields[4].isdigit():
            return int(fields[4])
    return None


def write_pid(local_dir: Path, pid: int) -> bool:
    """Name ``pid`` as the run's keeper in the pid file, whole or not at all; False when the disk
    is full (``keeper_pid`` then finds the keeper by its lock)."""
    tmp = local_dir / f".{KEEPER_PID}.{os.getpid()}.tmp"
    try:
        tmp.write_text(f"{pid}\n")
        os.replace(tmp, local_dir / KEEPER_PID)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def _is_keeper(pid: int, local_dir: Path) -> bool:
    """Whether ``pid`` is this run's keeper, alive: a recycled pid of another program is not."""
    try:
        cmdline = _cmdline(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if b"keep" not in cmdline or local_dir.name.encode() not in cmdline:
        return False
    try:   # exited, not yet reaped: not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _cmdline(pid: int, wait_s: float = 1.0) -> list[bytes]:
    """A process's arguments. Popen returns once exec has begun, but the kernel fills in the new
    program's arguments a moment later: read right after start_keeper (a loaded machine made it
    a test failure), cmdline is empty for a while, so an empty one is read again, within a bound."""
    deadline = time.monotonic() + wait_s
    while True:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        if raw or time.monotonic() > deadline:
            return raw.split(b"\0")
        time.sleep(0.01)


def start_keeper(run_id: str, runs_root: Path, options: SSHOptions, *, poll_s: float = POLL_S,
                 take_over: bool = False) -> int:
    """Start the keeper detached (own session, output to keeper.log); return its pid.
    ``take_over``: it waits for a keeper still running to exit, then keeps the run (restore)."""
    local_dir = runs_root / run_id
    argv = [sys.executable, "-m", "backend", "--runs", str(runs_root.resolve()), "keep",
            run_id, "--ssh-options", json.dumps(asdict(options)), "--poll", str(poll_s)]
    argv += ["--take-over"] if take_over else []
    proc = spawn(argv, local_dir / KEEPER_LOG)
    # Named at once, so it is found before it has written its own name; but never over a live
    # keeper's name (but a take-over's, meant to be the next): a reader that races another (both
    # saw none) starts one that loses the lock and exits, and its name written last hid the winner
    # from every Stop and status.
    if take_over or keeper_pid(local_dir) is None:
        write_pid(local_dir, proc.pid)
    return proc.pid


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen:
    """``argv`` detached (its own session, output appended to ``log_path``), reaped in the
    background when it ends, so a long-lived console does not collect zombies. A sweep's keeper
    starts this way too (backend/sweeps/control.py)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def ensure_keeper(run_id: str, runs_root: Path, options: SSHOptions) -> str:
    """Start a keeper for a kept run that has none; say so ("" when one is running)."""
    local_dir = runs_root / run_id
    if keeper_pid(local_dir):
        return ""
    pid = start_keeper(run_id, runs_root, options)
    return f"keeper not running: started a new one (pid {pid}, log {local_dir / KEEPER_LOG})"


def end_keeper(local_dir: Path, *, wait_s: float = 2.0) -> int | None:
    """After a stop: the run's keeper leaves at its next poll; one that does not (asleep in a
    back-off, stuck) gets TERM, then KILL. Returns the pid it had to signal, or None."""
    pid = keeper_pid(local_dir)
    if pid is None or pid == os.getpid():   # the keeper itself stopping a run: not its own end
        return None
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return None
        deadline = time.monotonic() + wait_s
        while keeper_pid(local_dir) == pid:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        else:
            return pid if sig is not None else None
    return pid
