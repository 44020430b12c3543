"""Per-worker metric series: a thread-safe, memory-bounded store fed by the run monitor.

Memory bound: each task holds five columns (int64 step, float64 time, loss, step_time,
examples_per_sec), 40 bytes a point, in arrays that grow by 1.5x, so at most 60 bytes a point
while growing. A task never holds more than ``max_points_per_task`` points: past it, the older
half is thinned to every other point. Bound: tasks x max_points_per_task x 60 bytes, plus the
global-loss series (3 columns, 24 bytes a step, same cap). With the default cap of 500,000 that is
30 MB per worker; 64 workers x 15,625 points take about 40 MB.

Snapshots are free: appends only write past every length handed out, and truncation or thinning
builds new arrays, so ``series()`` returns read-only views that never change under the reader.

Records arrive per (task, attempt) in step order (the chief writes them so). A record at or below
the latest step of its (task, attempt) is a replay and is dropped; a record of a newer attempt (the
job restarted from a checkpoint) cuts that task's series back to before its step, so the curve
shows what the resumed run did.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

FIELDS = ("step", "time", "loss", "step_time", "examples_per_sec")
_FLOATS = FIELDS[1:]
DEFAULT_MAX_POINTS = 500_000


@dataclass(frozen=True)
class Series:
    """One task's columns, as read-only numpy views of equal length."""
    step: np.ndarray
    time: np.ndarray
    loss: np.ndarray
    step_time: np.ndarray
    examples_per_sec: np.ndarray

    def __len__(self) -> int:
        return len(self.step)


class _Columns:
    """Growable columns; never rewrites a slot below ``n`` in place (see module docstring)."""

    def __init__(self, names: tuple[str, ...], cap: int) -> None:
        self.names, self.cap, self.n = names, cap, 0
        self.cols = {k: np.empty(0, np.int64 if k == "step" else np.float64) for k in names}

    def extend(self, data: Mapping[str, list]) -> None:
        count = len(data["step"])
        start = 0
        while start < count:   # chunks, so that thinning always makes room
            if self.n >= self.cap:
                self._rebuild(self._thin_index())
            take = min(count - start, self.cap - self.n)
            self._reserve(self.n + take)
            for k in self.names:
                self.cols[k][self.n:self.n + take] = data[k][start:start + take]
            self.n += take
            start += take

    def cut_before(self, step: int) -> None:
        """Drop points at or after ``step`` (a restarted attempt replaces them)."""
        keep = int(np.searchsorted(self.cols["step"][:self.n], step, side="left"))
        if keep < self.n:
            self._rebuild(np.arange(keep))

    def view(self, name: str) -> np.ndarray:
        v = self.cols[name][:self.n]
        v.flags.writeable = False
        return v

    def _reserve(self, need: int) -> None:
        size = len(self.cols["step"])
        if need > size:
            grown = min(self.cap, max(need, int(size * 1.5), 1024))
            for k, old in self.cols.items():
                new = np.empty(grown, old.dtype)
                new[:self.n] = old[:self.n]
                self.cols[k] = new

    def _thin_index(self) -> np.ndarray:
        half = self.n // 2
        return np.concatenate([np.arange(0, half, 2), np.arange(half, self.n)])

    def _rebuild(self, idx: np.ndarray) -> None:
        size = max(len(idx), min(self.cap, len(self.cols["step"])))
        for k, old in self.cols.items():
            new = np.empty(size, old.dtype)
            new[:len(idx)] = old[idx]
            self.cols[k] = new
        self.n = len(idx)


class _Task:
    def __init__(self, cap: int) -> None:
        self.cols = _Columns(FIELDS, cap)
        self.attempt = -1
        self.last_step = -1
        self.pending: dict[str, list] = {k: [] for k in FIELDS}

    def flush(self) -> None:
        if self.pending["step"]:
            self.cols.extend(self.pending)
            self.pending = {k: [] for k in FIELDS}


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


class MetricsStore:
    def __init__(self, *, max_points_per_task: int = DEFAULT_MAX_POINTS) -> None:
        self._lock = threading.Lock()
        self._cap = max(16, int(max_points_per_task))
        self._tasks: dict[str, _Task] = {}
        self._global = _Task(self._cap)
        self._global.cols = _Columns(("step", "time", "loss"), self._cap)
        self.rejected = 0       # records without a task name or an integer step
        self.version = 0        # bumps on every change: a cheap "redraw needed?" check

    def add(self, record: Mapping) -> int:
        return self.add_many((record,))

    def add_many(self, records: Iterable[Mapping]) -> int:
        """Store new records; return how many were kept (replays and bad records are not)."""
        kept = 0
        with self._lock:
            for rec in records:
                kept += self._add_one(rec)
            for t in self._tasks.values():
                t.flush()
            self._global.flush()
            if kept:
                self.version += 1
        return kept

    def _add_one(self, rec: Mapping) -> int:
        task, step = rec.get("task"), rec.get("step")
        if not isinstance(task, str) or not isinstance(step, int) or isinstance(step, bool):
            self.rejected += 1
            return 0
        t = self._tasks.get(task)
        if t is None:
            t = self._tasks[task] = _Task(self._cap)
        attempt = rec.get("attempt") or 0
        if not self._accept(t, attempt, step):
            return 0
        p = t.pending
        p["step"].append(step)
        p["time"].append(_num(rec.get("time")))
        p["loss"].append(_num(rec.get("loss")))
        p["step_time"].append(_num(rec.get("step_time")))
        p["examples_per_sec"].append(_num(rec.get("examples_per_sec")))
        g = self._global
        if rec.get("global_loss") is not None and self._accept(g, attempt, step):
            g.pending["step"].append(step)
            g.pending["time"].append(_num(rec.get("time")))
            g.pending["loss"].append(_num(rec.get("global_loss")))
        return 1

    @staticmethod
    def _accept(t: _Task, attempt: int, step: int) -> bool:
        if attempt == t.attempt:
            if step <= t.last_step:
                return False       # replay of a line we already hold
        elif attempt > t.attempt:
            t.flush()
            t.cols.cut_before(step)
            t.attempt = attempt
        else:
            return False           # an older attempt than the one shown
        t.last_step = step
        return True

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks, key=_task_order)

    def series(self, task: str) -> Series:
        with self._lock:
            t = self._tasks.get(task)
            if t is None:
                raise KeyError(task)
            return Series(**{k: t.cols.view(k) for k in FIELDS})

    def global_loss(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, mean loss over all workers) as read-only views."""
        with self._lock:
            return self._global.cols.view("step"), self._global.cols.view("loss")

    def downsampled(self, task: str, field: str = "loss", n: int = 2000, *,
                    smoothing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) with at most about ``n`` points; smoothing is applied before."""
        s = self.series(task)
        y = getattr(s, field)
        if smoothing:
            y = ema(y, smoothing)
        return downsample(s.step, y, n)

    def stragglers(self, window: int = 200) -> dict[str, float]:
        """Per task: median step time over its last ``window`` points / the pooled median."""
        recent = {}
        for task in self.tasks():
            v = self.series(task).step_time[-window:]
            v = v[np.isfinite(v)]
            if len(v):
                recent[task] = v
        if not recent:
            return {}
        pooled = float(np.median(np.concatenate(list(recent.values()))))
        if pooled <= 0:
            return {t: 1.0 for t in recent}
        return {t: float(np.median(v)) / pooled for t, v in recent.items()}

    def progress(self) -> int | None:
        """The latest step any worker reported, or None before the first record."""
        with self._lock:
            steps = [t.last_step for t in self._tasks.values() if t.cols.n]
        return max(steps) if steps else None

    def nbytes(self) -> int:
        with self._lock:
            every = list(self._tasks.values()) + [self._global]
            return sum(a.nbytes for t in every for a in t.cols.cols.values())


def _task_order(name: str):
    """chief-0, worker-1, worker-2, ..., worker-10: numbers sort as numbers."""
    role, _, index = name.rpartition("-")
    return (role, int(index)) if index.isdigit() else (name, -1)


def downsample(x: np.ndarray, y: np.ndarray, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """At most ~``n`` points that keep the shape and every spike (MinMaxLTTB)."""
    if len(x) <= n or n < 3:
        return np.asarray(x), np.asarray(y)
    from tsdownsample import MinMaxLTTBDownsampler, NaNMinMaxLTTBDownsampler
    y = np.ascontiguousarray(y, dtype=np.float64)
    algo = NaNMinMaxLTTBDownsampler() if np.isnan(y).any() else MinMaxLTTBDownsampler()
    idx = algo.downsample(np.ascontiguousarray(x), y, n_out=n)
    return x[idx], y[idx]


def ema(values, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential smoothing: non-finite points pass through unchanged
    and do not move the average; the first points are not pulled towards zero."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    y = np.asarray(values, dtype=np.float64)
    out = y.copy()
    if weight == 0.0 or len(y) == 0:
        return out
    ok = np.isfinite(y)
    x = y[ok]
    last = _ema_raw(x, weight)                       # starts from 0, like TensorBoard's
    debias = 1.0 - weight ** np.arange(1, len(x) + 1)
    out[ok] = last / debias
    return out


def _ema_raw(x: np.ndarray, w: float) -> np.ndarray:
    try:
        from scipy.signal import lfilter      # scipy comes with scikit-learn; C speed
    except ImportError:
        s, acc = np.empty_like(x), 0.0
        for i, v in enumerate(x):
            acc = acc * w + (1.0 - w) * v
            s[i] = acc
        return s
    return lfilter([1.0 - w], [1.0, -w], x)
