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

from backend.hosts.ssh import SSHOptions

POLL_S = 1.0            # detection delay vs. CPU: one status command per host per poll
KEEPER_LOG = "keeper.log"
KEEPER_PID = "keeper.pid"
KEEPER_LOCK = "keeper.lock"
REPO_ROOT = Path(__file__).resolve().parents[2]


def keeper_pid(local_dir: Path) -> int | None:
    """The pid of the run's live keeper, or None. A recycled pid of another program is not it."""
    try:
        pid = int((local_dir / KEEPER_PID).read_text().strip())
        cmdline = _cmdline(pid)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    if b"keep" not in cmdline or local_dir.name.encode() not in cmdline:
        return None
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None   # exited, not yet reaped
    except (FileNotFoundError, IndexError):
        return None
    return pid


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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(local_dir / KEEPER_LOG, "ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    (local_dir / KEEPER_PID).write_text(f"{proc.pid}\n")
    # Reap it when it ends, so a long-lived console does not collect zombies.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc.pid


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
