"""A run's goodput read from what it wrote: its record and the chief's metric lines (from the
chief's host while it answers, else the copies on this machine), accounted by the pure
``backend.records.goodput.account``."""
from __future__ import annotations

import json
import time
from pathlib import Path

from backend.alerts import goodput_alerts
from backend.client.harness.contract import layout, metric_line
from backend.errors import ConsoleError
from backend.records import goodput
from backend.watch import chief_metrics
from backend.watch.journal import MIRROR_DIR


def of(run, now: float | None = None, *, here_only: bool = False) -> goodput.Goodput:
    """Where ``run``'s task-seconds went, up to ``now`` for a live run. ``here_only``: from this
    machine's copies of the chief's lines only (a page redrawn every few seconds asks no host)."""
    if here_only:
        return here(run.state, run.local_dir, now)
    try:
        data, _ = chief_metrics.read_lines(run)
    except ConsoleError:   # the chief's host does not answer: what this machine kept
        data = b""
    return _account(run.state, data or _local_bytes(run.local_dir), now)


def here(state, local_dir: Path, now: float | None = None) -> goodput.Goodput:
    """``of`` from this machine's copies of the chief's lines only: no host is asked (Monitor's
    bar, the Runs page's column)."""
    return _account(state, _local_bytes(local_dir), now)


def copies(local_dir: Path) -> tuple[Path, Path]:
    """Where this machine keeps the chief's lines: the copy taken when the run ended, and the
    watch mirror's while Monitor showed it."""
    return chief_metrics.kept_path(local_dir), Path(local_dir) / MIRROR_DIR / layout.METRICS


def _account(state, data: bytes, now: float | None) -> goodput.Goodput:
    points = goodput.points_from_lines(_parse(data))
    return goodput.account(state, points, time.time() if now is None else now)


class Following:
    """``here`` for a page that asks again and again (Monitor's bar): each call folds only the
    whole lines appended to the longer local copy since the last call, where ``here`` parses the
    whole copy (3 s at 100,000 sync points, bench/goodput_cost.py). A copy replaced, shrunk or
    overtaken by the other copy is read again from its start."""

    def __init__(self, local_dir: Path) -> None:
        self.local_dir, self.points = Path(local_dir), {}
        self.path, self.inode, self.offset = None, None, 0

    def of(self, state, now: float | None = None) -> goodput.Goodput:
        found = [(_stat(p), p) for p in copies(self.local_dir)]
        st, path = max(found, key=lambda sp: sp[0].st_size if sp[0] else -1)
        if st is not None:
            size, inode = st.st_size, st.st_ino
            if path != self.path or inode != self.inode or size < self.offset:
                self.path, self.inode, self.offset, self.points = path, inode, 0, {}
            with open(path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
            whole = data[:data.rfind(b"\n") + 1]
            self.offset += len(whole)
            goodput.fold_points(self.points, _parse(whole))
        return goodput.account(state, list(self.points.values()), time.time() if now is None else now)


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:
        return None


LIVE_EVERY_S = 60.0   # how often a live run's goodput is read for its alert
UNREPORTED_AGAIN_S = 5.0   # ... and how soon again while it has reported no step yet


class LiveAlert:
    """``alerts.goodput_below`` while a run lives, for its keeper: from ``goodput_after_s`` of the
    run's life on (start-up dominates before), its goodput is read every LIVE_EVERY_S, fetching
    only the chief's new lines each time (folded into one point per sync point); read under
    the threshold, one alert for the run's life. Never raises: a host that does not answer is
    asked again at the next poll."""

    def __init__(self, local_dir: Path) -> None:
        self.watch = goodput_alerts.goodput_watch(local_dir)   # (below, after_s), or None: nothing to do
        self.new, self.points = chief_metrics.NewLines(), {}
        self.next_at, self.said = 0.0, False

    def check(self, run, now: float) -> goodput.Goodput | None:
        """The goodput read at this poll, if one was due (and whether it alerted is the outbox's)."""
        if self.watch is None or self.said or now < self.next_at or now - run.state.created < self.watch[1]:
            return None
        try:
            data, _ = self.new.read(run)
        except ConsoleError:
            return None
        # Kept across a replaced file or a chief moved to a spare: each sync point once, by key.
        goodput.fold_points(self.points, _parse(data))
        found = goodput.account(run.state, list(self.points.values()), now)
        # Nothing trained yet: look again soon, not at every poll (each read is a host command).
        self.next_at = now + (LIVE_EVERY_S if found.reported else UNREPORTED_AGAIN_S)
        if not found.reported:
            return found
        if found.share is not None and found.share < self.watch[0]:
            self.said = True   # once for the run's life (the outbox's key keeps it once across keepers)
            try:
                goodput_alerts.on_low_goodput_live(run.local_dir, run.run_id, share=found.share,
                                           said=goodput.summary(found), attempt=run.state.attempt,
                                           step=max((p.step for p in self.points.values()), default=None))
            except OSError:   # the console's disk: the keeper says so on its own
                pass
        return found


def _local_bytes(local_dir: Path) -> bytes:
    return max((_read(p) for p in copies(local_dir)), key=len)


def _parse(data: bytes) -> list:
    out = []
    for raw in data.splitlines():
        try:
            out.append(metric_line.parse(json.loads(raw)))
        except (ValueError, RecursionError):   # a half-written line
            continue
    return out


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
