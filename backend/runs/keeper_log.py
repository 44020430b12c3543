"""The keeper's log, ``keeper.log`` (its stdout and stderr): whole lines, and never its end.

The log lies in the run's folder, on the console machine's disk. When that disk filled, a
``print`` there raised inside the keeper's own error handler and the keeper died, leaving its
run unwatched. Here a line that cannot be written is held (the last ``HELD`` of them)
and written before the next one, once there is room; a write cut short is undone, so the log never
holds half a line. Text from jobs and hosts is written through ``term_safe``, as the CLI prints it.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque

from backend.term_text import term_safe

HELD = 200


class KeeperLog:
    """``log(msg)`` writes one time-stamped line; ``write``/``flush`` let it stand for sys.stdout
    and sys.stderr (lines as they come, no time stamp)."""

    def __init__(self, fd: int = 1) -> None:
        self.fd = fd
        self.held: deque[str] = deque()
        self.lost = 0            # lines dropped while more than HELD waited for room
        self._partial = ""       # a write() without its newline yet
        self._lock = threading.Lock()   # the alert's thread logs too

    def __call__(self, msg: str) -> None:
        self._add(f"{time.strftime('%H:%M:%S')} {msg}\n")

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._add(line + "\n")
        return len(text)

    def flush(self) -> None:
        with self._lock:
            self._drain()

    def _add(self, line: str) -> None:
        with self._lock:
            if len(self.held) >= HELD:
                self.held.popleft()
                self.lost += 1
            self.held.append(term_safe(line))
            self._drain()

    def _drain(self) -> bool:
        """Write the held lines in order; False (and they stay held) while there is no room."""
        while self.held:
            text = self.held[0]
            if self.lost:
                text = f"... {self.lost} line(s) not kept while the disk was full\n" + text
            if not append_whole(self.fd, text.encode()):
                return False
            self.held.popleft()
            self.lost = 0
        return True


def append_whole(fd: int, data: bytes) -> bool:
    """Append ``data`` to the file open as ``fd``, all of it or none: a write cut short by a full
    disk is truncated away. False if it could not be written."""
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        start = None   # a pipe or a terminal: nothing to undo
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
        return True
    except OSError:
        if start is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        return False
