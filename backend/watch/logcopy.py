"""Logs that outlive their hosts: every task's log copied to this machine as it grows.

The watch agent streams the logs it can see, those in the chief's run directory, into
``runs/<id>/watch_mirror/logs/``. A task on another host (or in another run directory) is copied
here instead: every few seconds the new bytes of its log come over through hostctl ``read`` and
are appended to ``runs/<id>/logs/<task>.log``, the file ``Run.mirror_logs`` fills when a run ends.
``Run.log_tail`` reads these copies when a host does not answer, so a finished run's logs read
the same with every host down.
"""
from __future__ import annotations

import threading
from pathlib import Path

from backend.hosts import remote
from backend.errors import ConsoleError
from backend.harness import layout
from backend.hosts.pool import Pool
from backend.hosts.tasks import RunOnHosts, place, task_host

EVERY_S = 2.0
MIRRORED = Path("watch_mirror") / layout.LOGS   # backend.watch.journal's log mirror


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
        path = self.run.local_dir / layout.LOGS / f"{task}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        offset = path.stat().st_size if path.exists() else 0
        while True:
            data, size = remote.read_at(host, f"{layout.LOGS}/{task}.log", offset)
            if 0 <= size < offset:       # a new file on the host: copy it from its start
                path.write_bytes(b"")
                offset = 0
                continue
            if not data:
                return
            with open(path, "ab") as fh:
                fh.write(data)
            offset += len(data)
