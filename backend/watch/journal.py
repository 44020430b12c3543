"""What the run monitor has consumed, kept in the local run directory.

``watch_offsets.json`` holds the agent's offsets as of the last committed batch, plus the size of
each local mirror file at that moment. ``watch_mirror/`` holds every metric line and log line
consumed, so a console that restarts can rebuild its store and resume the agent where it stopped.
On open, mirror files are cut back to their committed sizes: lines written after the last commit
will be sent again by the agent, so keeping them would count them twice.

The mirror is appended on every commit; ``watch_offsets.json`` is written at most every
``STATE_EVERY_S`` and on close. A busy run commits about 30 batches a second, and writing the
state file each time (open, JSON, rename: 0.2 ms of CPU) was a tenth of the console's CPU with
Monitor open (bench/README.md, "Console CPU"). A console that dies between two writes loses
nothing: the cut-back above drops the lines after the written state, and the agent sends them
again from the written offsets.
"""
from __future__ import annotations

import json
import os
import time
from typing import IO, Iterator

from backend.client.harness.contract import layout

METRICS = layout.METRICS   # the mirror keeps the run folder's name for it

OFFSETS_FILE = "watch_offsets.json"
MIRROR_DIR = "watch_mirror"
STATE_EVERY_S = 0.5   # the most the state file lags the mirror while the monitor runs


class Journal:
    def __init__(self, local_run_dir: str, state_every_s: float = STATE_EVERY_S) -> None:
        self.dir = local_run_dir
        self.path = os.path.join(local_run_dir, OFFSETS_FILE)
        self.mirror = os.path.join(local_run_dir, MIRROR_DIR)
        state = _load(self.path)
        self.offsets: dict = state.get("offsets", {})
        self.sizes: dict[str, int] = state.get("mirror", {})
        self.skipped: dict[str, int] = state.get("skipped", {})
        self.cut: dict[str, int] = state.get("cut", {})   # log -> earlier bytes cut (its note)
        self._files: dict[str, IO[bytes]] = {}
        self._state_every_s = state_every_s
        self._state_written = float("-inf")   # time.monotonic() of the last write
        self._state_due = False               # a commit since then, not yet on disk
        self._cut_back()

    def _cut_back(self) -> None:
        for rel in self._mirror_files():
            path = os.path.join(self.mirror, rel)
            if os.path.getsize(path) > self.sizes.get(rel, 0):
                os.truncate(path, self.sizes.get(rel, 0))

    def _mirror_files(self) -> list[str]:
        out = []
        for root, _, names in os.walk(self.mirror):
            out += [os.path.relpath(os.path.join(root, n), self.mirror) for n in names]
        return out

    def metric_blocks(self, size: int = 32 << 20) -> Iterator[bytes]:
        """The mirrored metric lines in blocks of about ``size`` bytes, each ending in a newline
        (a torn last line, from a crash mid-write, gets one and is quarantined by the parser)."""
        return self.read_blocks(os.path.join(self.mirror, METRICS), size)

    @staticmethod
    def read_blocks(path: str, size: int = 32 << 20) -> Iterator[bytes]:
        """A file of lines in blocks of about ``size`` bytes, each ending in a newline."""
        if not os.path.exists(path):
            return
        with open(path, "rb") as fh:
            yield from line_blocks(fh, size)

    def recent_logs(self, n: int) -> dict[str, list[str]]:
        """The last ``n`` lines of each task's mirrored log (read from the end: logs get big)."""
        out = {}
        folder = os.path.join(self.mirror, "logs")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - n * 512))
                lines = fh.read().decode("utf-8", "replace").splitlines()
            out[name[:-4]] = lines[-n:]
        return out

    def commit(self, metric_blocks: list[bytes], logs: dict[str, list[str]],
               skipped: dict[str, int], offsets: dict) -> None:
        """Mirror first, then the offsets that say those lines are consumed: in memory now, on
        disk (``write_state``) if the last write is ``state_every_s`` old, else at a later commit
        or at close."""
        if metric_blocks:
            self._append(METRICS, b"".join(metric_blocks))
        for task, lines in logs.items():
            self._append(f"logs/{task}.log", ("\n".join(lines) + "\n").encode())
        for name, count in skipped.items():
            self.skipped[name] = self.skipped.get(name, 0) + count
        self.offsets = offsets
        self._state_due = True
        if time.monotonic() - self._state_written >= self._state_every_s:
            self.write_state()

    def write_state(self) -> None:
        """The offsets and mirror sizes of the last commit, on disk (atomic rename)."""
        state = {"offsets": self.offsets, "mirror": self.sizes, "skipped": self.skipped,
                 "cut": self.cut}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.path)
        self._state_written, self._state_due = time.monotonic(), False

    def _append(self, rel: str, data: bytes) -> None:
        fh = self._files.get(rel)
        if fh is None:
            path = os.path.join(self.mirror, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fh = self._files[rel] = open(path, "ab")
        fh.write(data)
        fh.flush()
        self.sizes[rel] = fh.tell()
        if rel.startswith("logs/"):
            from backend.watch import logcopy   # hosts and SSH: loaded only where logs are written
            if self.sizes[rel] > logcopy.COPY_MAX:
                self._trim(rel, logcopy.trimmed)

    def _trim(self, rel: str, trimmed) -> None:
        """A log mirror past ``logcopy.COPY_MAX`` rewritten as its newest half under a first line
        saying what was cut, as the other log copies are (a job printing 17 MB of lines
        left a 17 MB mirror). Its new size goes to disk at once: a console that dies before that
        finds a mirror smaller than the state says, keeps it, and gets this batch's lines again
        (once, from the agent's saved offsets)."""
        self._files.pop(rel).close()
        path = os.path.join(self.mirror, rel)
        with open(path, "rb") as fh:
            data, self.cut[rel] = trimmed(fh.read(), self.cut.get(rel, 0))
        tmp = os.path.join(self.dir, f"{MIRROR_DIR}.trim.tmp")   # off the mirror: never a task's log
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        self.sizes[rel] = len(data)
        self._state_written = float("-inf")   # commit writes the state now

    def close(self) -> None:
        if self._state_due:
            self.write_state()
        for fh in self._files.values():
            fh.close()
        self._files.clear()


def _load(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def line_blocks(fh: IO[bytes], size: int = 32 << 20, *, torn_tail: bool = True) -> Iterator[bytes]:
    """``fh``'s lines from where it stands, in blocks of about ``size`` bytes, each ending in a
    newline. A last line without its newline is given one (``torn_tail``: a crash's torn line,
    quarantined by the parser) or left unread (a line the console is still writing)."""
    rest = b""
    while data := fh.read(size):
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        rest = data[cut:]
    if rest and torn_tail:
        yield rest + b"\n"
