"""A run's goodput read from what it wrote: its record and the chief's metric lines (from the
chief's host while it answers, else the copies on this machine), accounted by the pure
``backend.records.goodput.account``."""
from __future__ import annotations

import json
import time
from pathlib import Path

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
