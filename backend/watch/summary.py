"""A run's metrics in a few numbers: the last value of every metric per worker and global, and
the best global value with its step. One summary for every reader: ``tfconsole metrics``,
``runs --json``, the Runs page's table and its compare picker.

``from_mirror`` reads the metric lines a console (or ``tfconsole metrics``) copied into the run's
local folder; it parses them once per file version (path, size, mtime): a click on the Runs
page that shows the same runs again re-reads nothing.
"""
from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from backend.harness import metric_line
from backend.watch.journal import METRICS, MIRROR_DIR, Journal
from backend.watch.lines import parse_metric_block
from backend.watch.metrics import MetricsStore

CACHED_RUNS = 16          # parsed stores kept; 16 runs of 200k rows take about 150 MB at most
CACHED_SUMMARIES = 4096   # a summary is a few hundred bytes: every run of a big runs folder
_cache: OrderedDict = OrderedDict()
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
    return Path(run_dir) / MIRROR_DIR / METRICS


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
    """A store of the run's locally copied metric lines (an empty one when there are none),
    parsed once per version of the file. Do not add to the store returned: it is shared."""
    path = mirror_path(run_dir)
    key = _version(path)
    if key[1] is None:
        return MetricsStore()
    with _lock:
        store = _cache.get(str(path))
        if store is not None and store[0] == key:
            _cache.move_to_end(str(path))
            return store[1]
    store = MetricsStore()
    for block in Journal.read_blocks(path):
        cols, _ = parse_metric_block(block)
        store.add_columns(cols)
    with _lock:
        _cache[str(path)] = (key, store)
        _cache.move_to_end(str(path))
        while len(_cache) > CACHED_RUNS:
            _cache.popitem(last=False)
    return store
