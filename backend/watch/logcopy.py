"""Logs that outlive their hosts: every task's log copied to this machine as it grows.

The watch agent streams the logs it can see, those in the chief's run directory, into
``runs/<id>/watch_mirror/logs/``. A task on another host (or in another run directory) is copied
here instead: every few seconds the new bytes of its log come over through hostctl ``read`` and
are appended to ``runs/<id>/logs/<task>.log``, the file ``Run.mirror_logs`` fills when a run ends.
``Run.log_tail`` reads these copies when a host does not answer, so a finished run's logs read
the same with every host down.

Both copies, and the watch mirror's logs, are bounded as docs/reliability.md promises
: every line is kept as its first ``LINE_MAX`` bytes and `` ... [cut N bytes]``, and a
copy over ``COPY_MAX`` keeps its newest half under a first line saying how many earlier bytes
were cut (the whole log stays on the host). A copy grown here remembers where on the host it stopped in ``.<task>.log.copied.json``
beside it: after a cut, the copy's size is no longer the host's offset.
"""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from backend.hosts import remote
from backend.errors import ConsoleError
from backend.client.harness.contract import layout
from backend.hosts.pool import Pool
from backend.hosts.tasks import RunOnHosts, place, task_host

EVERY_S = 2.0
MIRRORED = Path("watch_mirror") / layout.LOGS   # backend.watch.journal's log mirror
LINE_MAX = 4096          # as the watch agent's LOG_LINE_MAX: a 1 MB progress line keeps 4 KiB
COPY_MAX = 4 << 20       # a task's copy; past it the newest half is kept
SNAPSHOT_READ = 4 * COPY_MAX   # the end of a host's log read when a run ends (was 50 MB)
# Snapshots read at once (one after another, 32 took most of a 32-task stop). Each read
# holds up to SNAPSHOT_READ bytes and its transfer encoding, about 50 MiB: 4 keep it near 200 MiB.
READS_AT_ONCE = 4


def cut_lines(data: bytes, seen: int = 0) -> tuple[bytes, int]:
    """``data`` with every line cut to ``LINE_MAX`` bytes and a marker, as a stream: ``seen`` is
    how many bytes of an unfinished line came before (0 at a line's start); returns the bytes to
    keep and the new ``seen``. A line still growing gets its marker when its newline arrives."""
    out = bytearray()
    parts = data.split(b"\n")
    for i, part in enumerate(parts):
        room = max(0, LINE_MAX - seen)
        out += part if len(part) <= room else _whole_chars(part[:room])
        seen += len(part)
        if i < len(parts) - 1:   # the line ends here
            if seen > LINE_MAX:
                out += f" ... [cut {seen - LINE_MAX} bytes]".encode()
            out += b"\n"
            seen = 0
    return bytes(out), seen


def _whole_chars(data: bytes) -> bytes:
    """``data`` less a UTF-8 character split at its end (no stray glyph at the cut)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:   # the last character's first byte
            width = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return data if back >= width else data[:-back]
    return data


def _note(dropped: int) -> bytes:
    """The copy's first line once its start was cut (``dropped`` < 0: how much is not known)."""
    count = f"{dropped} " if dropped >= 0 else ""
    return (f"... [cut {count}earlier bytes: this copy keeps about the last {COPY_MAX >> 20} MiB, "
            "the whole log stays on its host]\n").encode()


def _keep_newest(data: bytes, dropped: int) -> tuple[bytes, int]:
    """``data`` (a copy without its note) cut to its newest half, from a line start, when it is
    over ``COPY_MAX``; with the note and the new count of earlier bytes cut."""
    if len(data) > COPY_MAX:
        start = len(data) - COPY_MAX // 2
        start = data.find(b"\n", start - 1) + 1 or start
        dropped, data = (dropped + start if dropped >= 0 else dropped), data[start:]
    return (_note(dropped) + data if dropped else data), dropped


def trimmed(copy: bytes, dropped: int) -> tuple[bytes, int]:
    """A copy (``copy``, its note included) cut to its newest half under a new note when it is
    over ``COPY_MAX``; with the new count of earlier bytes cut. The one bounding routine of the
    live copy here and of the watch mirror (``backend.watch.journal``)."""
    note = _note(dropped) if dropped else b""   # the copy's first line
    return _keep_newest(copy[len(note):] if copy.startswith(note) else copy, dropped)


def _state_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.copied.json")


def _read_state(path: Path) -> dict | None:
    try:
        state = json.loads(_state_path(path).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(state, dict) and all(isinstance(state.get(k), int) for k in ("line", "dropped"))
    return state if ok and (state.get("offset") is None or isinstance(state["offset"], int)) else None


def _replace(target: Path, content: bytes) -> None:
    part = target.with_name(f"{target.name}.{os.getpid()}.part")
    part.write_bytes(content)
    os.replace(part, target)


def _write(path: Path, data: bytes, state: dict) -> None:
    """The copy and where it stopped, each replaced whole (a reader never sees half a copy)."""
    _replace(path, data)
    _replace(_state_path(path), json.dumps(state).encode())


def keep_snapshot(path: Path, text: str, *, asked: int) -> None:
    """Write the end of a task's log (``text``: its last ``asked`` bytes, read when an attempt
    ends) as its bounded copy."""
    data = text.encode(errors="replace")
    dropped = 0
    if len(data) >= asked:   # only the log's end: its first line is partial, what came before unknown
        data, dropped = data[data.find(b"\n") + 1:], -1
    data, _ = cut_lines(data)
    data, dropped = _keep_newest(data, dropped)
    # offset None: a copier that goes on (between attempts) starts at the host's end from here
    _write(path, data, {"offset": None, "line": 0, "dropped": dropped})


def keep_snapshots(run: RunOnHosts, read_tail: Callable[[str, int], str]) -> list[str]:
    """Every task's log end (``read_tail(task, SNAPSHOT_READ)``) kept as its bounded copy in
    ``runs/<id>/logs/``, ``READS_AT_ONCE`` tasks at a time; returns the tasks whose host did not
    answer (their copies stay as they were)."""
    folder = run.local_dir / layout.LOGS
    folder.mkdir(parents=True, exist_ok=True)

    def one(task: str) -> bool:
        try:
            text = read_tail(task, SNAPSHOT_READ)
        except ConsoleError:
            return False
        if text:   # bounded like the live copy: 4 KiB a line, about 4 MiB a task
            keep_snapshot(folder / f"{task}.log", text, asked=SNAPSHOT_READ)
        return True
    names = [t.name for t in run.state.tasks]
    with ThreadPoolExecutor(max_workers=max(1, min(READS_AT_ONCE, len(names)))) as ex:
        answered = list(ex.map(one, names))
    return [name for name, ok in zip(names, answered) if not ok]


def local_copy(run: RunOnHosts, task: str) -> Path | None:
    """The fuller of the two local copies of a task's log, or None when there is none."""
    found = [p for p in (run.local_dir / layout.LOGS / f"{task}.log", run.local_dir / MIRRORED / f"{task}.log")
             if p.exists()]
    return max(found, key=lambda p: p.stat().st_size) if found else None


def unwatched(run: RunOnHosts) -> list[str]:
    """Tasks whose log the chief's watch agent cannot see: another host or run directory."""
    where = place(run.state.chief, run.cluster)
    return [t.name for t in run.state.tasks if place(t, run.cluster) != where]


class LogCopier:
    """A thread that keeps ``runs/<id>/logs/<task>.log`` growing for the unwatched tasks."""

    def __init__(self, run: RunOnHosts, *, every_s: float = EVERY_S) -> None:
        self.run, self.every_s = run, every_s
        self.pool = Pool(run.pool.options)   # its own connections: this thread shares none
        self.tasks = unwatched(run)
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "LogCopier":
        if self.tasks and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="log-copier", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.pool.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.copy_once()
            if not self.run.state.live:   # ended: Run.mirror_logs has taken the whole logs
                return
            self._stop.wait(self.every_s)

    def copy_once(self) -> None:
        for task in self.tasks:
            try:
                self._copy(task)
                self.errors.pop(task, None)
            except (ConsoleError, OSError) as err:   # a host down: keep what we have, try again
                self.errors[task] = str(err)

    def _copy(self, task: str) -> None:
        host = task_host(self.pool, self.run.cluster, self.run.task(task))
        rel = f"{layout.LOGS}/{task}.log"
        path = self.run.local_dir / layout.LOGS / f"{task}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        state = _read_state(path)
        if state is None:   # a copy from before the cut, or none: its size is the host's offset
            state = {"offset": path.stat().st_size if path.exists() else 0, "line": 0, "dropped": 0}
        elif state["offset"] is None:   # a snapshot kept when an attempt ended: go on from the host's end
            state["offset"] = max(0, remote.read_at(host, rel, 1 << 62, limit=0)[1])
        while True:
            data, size = remote.read_at(host, rel, state["offset"])
            if 0 <= size < state["offset"]:       # a new file on the host: copy it from its start
                _write(path, b"", {"offset": 0, "line": 0, "dropped": 0})
                state = {"offset": 0, "line": 0, "dropped": 0}
                continue
            if not data:
                return
            kept, state["line"] = cut_lines(data, state["line"])
            state["offset"] += len(data)
            self._append(path, kept, state)

    @staticmethod
    def _append(path: Path, kept: bytes, state: dict) -> None:
        with open(path, "ab") as fh:
            fh.write(kept)
        if path.stat().st_size > COPY_MAX:   # rewritten whole, about once per COPY_MAX / 2 copied
            data, state["dropped"] = trimmed(path.read_bytes(), state["dropped"])
            _write(path, data, state)
        else:
            _replace(_state_path(path), json.dumps(state).encode())
