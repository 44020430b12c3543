"""A run's metrics in a few numbers: the last value of every metric per worker and global, and
the best global value with its step. One summary for every reader: ``tfconsole metrics``,
``runs --json``, the Runs page's table and its compare picker.

``from_mirror`` reads the metric lines a console (or ``tfconsole metrics``) copied into the run's
local folder; it parses each line once: a click on the Runs page that shows the same runs again
re-reads nothing, and a live run's growing file is read only from where the last click stopped
(its last complete line), its new lines fed into the same store (re-parsing a
64-worker run's whole file took 11 s of CPU per click after 30 minutes).
"""
from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from backend.client.harness.contract import metric_line
from backend.watch.chief_metrics import kept_path
from backend.watch.journal import METRICS, MIRROR_DIR, line_blocks
from backend.watch.lines import parse_metric_block
from backend.watch.metrics import MetricsStore

CACHED_RUNS = 16          # parsed stores kept; 16 runs of 200k rows take about 150 MB at most
CACHED_SUMMARIES = 4096   # a summary is a few hundred bytes: every run of a big runs folder
_cache: OrderedDict = OrderedDict()   # path -> _Parsed
bytes_parsed = 0          # bytes of metric lines parsed since start: tests and bench/runs_page.py
_summaries: OrderedDict = OrderedDict()
_lock = threading.Lock()


def summarize(store: MetricsStore) -> dict:
    """{"step": last step, "global": {name: {"last", "last_step", "best", "best_step", "mode"}},
    "workers": {task: {name: last value}}}; values are floats or None (not finite)."""
    out: dict = {"step": store.progress(), "global": {}, "workers": {}}
    for name in store.metric_names():
        steps, values = store.metric(name)
        if len(steps):
            out["global"][name] = _last_and_best(name, steps, values)
        for task in store.metric_tasks(name):
            steps, values = store.metric(name, task)
            if len(steps):
                out["workers"].setdefault(task, {})[name] = _num(values[-1])
    return out


def _last_and_best(name: str, steps: np.ndarray, values: np.ndarray) -> dict:
    mode = metric_line.direction(name)
    entry = {"last": _num(values[-1]), "last_step": int(steps[-1]), "best": None,
             "best_step": None, "mode": mode}
    finite = np.flatnonzero(np.isfinite(values))
    if mode and len(finite):
        pick = finite[np.argmin(values[finite]) if mode == "min" else np.argmax(values[finite])]
        entry.update(best=float(values[pick]), best_step=int(steps[pick]))
    return entry


def _num(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def mirror_path(run_dir: str | Path) -> Path:
    """The run's local metric lines: what Monitor copied while it watched (the watch mirror), or
    the copy the run's last ended attempt kept (``chief_metrics.keep``), whichever holds more: a
    run never opened on Monitor has only the kept copy, a restarted run watched live has a
    mirror past its last kept copy."""
    watched = Path(run_dir) / MIRROR_DIR / METRICS
    kept = kept_path(run_dir)
    return kept if _size(kept) > _size(watched) else watched


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def of_mirror(run_dir: str | Path) -> dict:
    """``summarize`` of the run's local metrics, kept per version of the file: a runs table of
    many runs re-parses only the runs whose metrics changed, whatever ``CACHED_RUNS`` holds."""
    key = _version(mirror_path(run_dir))
    with _lock:
        found = _summaries.get(key[0])
        if found is not None and found[0] == key:
            return found[1]
    found = summarize(from_mirror(run_dir))
    with _lock:
        _summaries[key[0]] = (key, found)
        while len(_summaries) > CACHED_SUMMARIES:
            _summaries.popitem(last=False)
    return found


def _version(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return (str(path), None, None)
    return (str(path), st.st_size, st.st_mtime_ns)


def from_mirror(run_dir: str | Path) -> MetricsStore:
    """A store of the run's locally copied metric lines (an empty one when there are none).
    Lines already parsed are not parsed again; lines added since are fed into the cached store,
    and a file that shrank or was replaced is parsed from its start into a new store. Do not add
    to the store returned: it is shared."""
    global bytes_parsed
    path = mirror_path(run_dir)
    try:
        fh = open(path, "rb")
    except OSError:
        return MetricsStore()
    with fh:
        st = os.fstat(fh.fileno())
        ident = (st.st_dev, st.st_ino)
        with _lock:
            entry = _cache.get(str(path))
            if entry is None or entry.ident != ident or st.st_size < entry.offset:
                entry = _cache[str(path)] = _Parsed(ident)
            _cache.move_to_end(str(path))
            while len(_cache) > CACHED_RUNS:
                _cache.popitem(last=False)
        with entry.lock:     # one reader feeds a store: two clicks at once must not add rows twice
            if st.st_size > entry.offset:
                fh.seek(entry.offset)
                for block in line_blocks(fh, torn_tail=False):   # a half-written line waits
                    cols, _ = parse_metric_block(block)
                    entry.store.add_columns(cols)
                    entry.offset += len(block)
                    with _lock:
                        bytes_parsed += len(block)
            return entry.store


class _Parsed:
    """One mirror's store and how far into the file it has read (always after a newline)."""

    def __init__(self, ident: tuple) -> None:
        self.ident, self.offset = ident, 0
        self.store = MetricsStore()
        self.lock = threading.Lock()
