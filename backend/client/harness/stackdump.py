"""Hang diagnosis on the host: every task's Python stacks on demand. Standard library only.

The harness calls ``install`` first thing: ``faulthandler`` then writes every thread's Python
stack to ``stacks/<task>.txt`` when the process gets SIGUSR1, from C, even while the main thread
is blocked inside a TensorFlow collective. ``dump`` (hostctl's ``stacks``) sends that signal and
reads back what was appended. A process that did not install the handler is never signalled:
SIGUSR1's default action would kill it.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import time

from . import layout

SIGNAL = signal.SIGUSR1
_files: list = []   # the stacks file must stay open for the life of the process


def install(run: str, task: str) -> str:
    """Register the handler; returns the stacks file it writes to."""
    path = layout.stacks_file(run, task)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fh = open(path, "a", buffering=1)
    fh.write(f"=== stacks of {task}, pid {os.getpid()}: written on SIGUSR1 ===\n")
    _files.append(fh)
    faulthandler.register(SIGNAL, file=fh, all_threads=True, chain=False)
    return path


def catches(pid: int, sig: int = SIGNAL) -> bool:
    """Whether ``pid`` has a handler for ``sig`` (the SigCgt mask in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def dump(run: str, task: str, pid: int, wait_s: float) -> str:
    """Signal ``pid`` and return the stacks it appended (waits until the file stops growing)."""
    path = layout.stacks_file(run, task)
    try:
        before = os.path.getsize(path)
    except OSError:
        before = 0
    os.kill(pid, SIGNAL)
    deadline, size, still = time.time() + wait_s, before, 0
    while time.time() < deadline:
        time.sleep(0.05)
        now = os.path.getsize(path) if os.path.exists(path) else 0
        still = still + 1 if now == size and now > before else 0
        size = now
        if still >= 4:   # 0.2 s without growth: faulthandler has finished writing
            break
    with open(path, "rb") as fh:
        fh.seek(before)
        return fh.read().decode(errors="replace")
