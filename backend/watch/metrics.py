"""Per-worker metric series: a thread-safe, memory-bounded store fed by the run monitor.

Memory bound: each task holds five columns (int64 step, float64 time, loss, step_time,
examples_per_sec), 40 bytes a point, in arrays that grow by 1.5x, so at most 60 bytes a point
while growing; a named metric's series holds three (step, time, value), at most 36 bytes a point.
The store shares one budget of ``max_points`` (default 2,000,000) among all its series: each may
hold ``max_points / series`` points (at least MIN_POINTS, at most ``max_points_per_task``), and a
new series shrinks the others' share. Past its share, a series' older half is thinned to every
other point. Bound: ``max_points`` x 60 bytes (120 MB) however long the run and however many
workers, where a share is above MIN_POINTS; a run of very many series gets MIN_POINTS each
instead (64 workers x 10 metrics: 715 series x 4,096 points, about 130 MB at most); plus each
series' first allocation (1,024 points, 40 KB; 29 MB for those 715). A long-lived console does not grow without end.

Snapshots are free: appends only write past every length handed out, and truncation or thinning
builds new arrays, so ``series()`` returns read-only views that never change under the reader.

Names: at most MAX_TASKS distinct task names of at most MAX_TASK_NAME characters; lines past
them are dropped and counted (``warning()``).

Named metrics (accuracy, val_loss, learning_rate ...) are kept beside these columns, each a
(step, time, value) series under the same budget and rules (named_series.py).

Records arrive per (task, attempt) in step order (the chief writes them so). A record at or below
the latest step of its (task, attempt) is a replay and is dropped; a record of a newer attempt (the
job restarted from a checkpoint) cuts that task's series back to before its step, so the curve
shows what the resumed run did.

Why one file of this size: one lock and one memory budget govern every series of the store (the
columns, each task's series, the named metrics' share), so the store, its columns and its thinning
rules are one file; the chart helpers at its end (downsample, ema) are the store's readers.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from backend.client.harness.contract import metric_line
from backend.watch.named_series import NAMED, NamedSeries, fold_loss, named_columns

FIELDS = ("step", "time", "loss", "step_time", "examples_per_sec")
_FLOATS = FIELDS[1:]
DEFAULT_MAX_POINTS = 500_000     # one series at most
DEFAULT_BUDGET = 2_000_000       # all series together (module docstring)
MIN_POINTS = 4096                # a series' share never falls below this
# A job names its tasks; each new name costs a series (about 40 KiB even when empty), so a job
# that writes a new name per line could fill the console's memory. Past these, the
# lines are dropped and counted, and ``warning()`` says so.
MAX_TASKS = 1024
MAX_TASK_NAME = 128


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
            while self.n >= self.cap:   # a share made smaller may need more than one pass
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
    """One series plus what de-duplication needs: the attempt shown and its latest step."""

    def __init__(self, names: tuple[str, ...], cap: int) -> None:
        self.cols = _Columns(names, cap)
        self.attempt = -1
        self.last_step = _NO_STEP

    def add(self, attempt: np.ndarray, data: dict[str, np.ndarray]) -> int:
        """Rows in arrival order; a batch that spans a restart is split into runs of one attempt."""
        if len(attempt) == 0:
            return 0
        cuts = np.flatnonzero(np.diff(attempt)) + 1
        if not len(cuts):
            return self._add_run(int(attempt[0]), data)
        return sum(self._add_run(int(attempt[rows[0]]), {k: v[rows] for k, v in data.items()})
                   for rows in np.split(np.arange(len(attempt)), cuts))

    def _add_run(self, attempt: int, data: dict[str, np.ndarray]) -> int:
        step = data["step"]
        if attempt < self.attempt:
            return 0                                    # an older attempt than the one shown
        if attempt > self.attempt:                      # restarted: its steps replace ours
            self.cols.cut_before(int(step[0]))
            self.attempt, self.last_step = attempt, _NO_STEP
        # keep a row only if its step is above every step before it: the rest are replays
        before = np.maximum.accumulate(np.concatenate(([self.last_step], step[:-1])))
        keep = step > before
        if not keep.all():
            data = {k: v[keep] for k, v in data.items()}
        if len(data["step"]):
            self.cols.extend(data)
            self.last_step = int(data["step"][-1])
        return len(data["step"])


_NO_STEP = -metric_line.STEP_BOUND
# input_wait and first_batch: the harness's input measurements (harness/step_probe.py), kept
# per task as small summaries (``input_wait``, ``same_data``), not as series.
_FLOAT_IN = metric_line.FLOATS + tuple(metric_line.LEGACY)
WAIT_WINDOW = 5   # input_wait: the mean of a task's last few sync points (a steady figure)


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _floats(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)     # None becomes NaN here, at C speed
    except (TypeError, ValueError):
        return np.array([_num(v) for v in values], dtype=np.float64)


def records_to_columns(records: Iterable[Mapping]) -> tuple[dict, int]:
    """Columns for ``add_columns`` and the number of records without a task or integer step."""
    records = list(records)
    good = [r for r in records if metric_line.usable(r)]
    try:
        floats = {name: _floats([r.get(name) for r in good]) for name in _FLOAT_IN}
    except OverflowError:   # rare: find the records at fault rather than pay for a check per record
        good = [r for r in good if all(_fits(r.get(name)) for name in _FLOAT_IN)]
        floats = {name: _floats([r.get(name) for r in good]) for name in _FLOAT_IN}
    cols = {"task": [r["task"] for r in good], **named_columns([r.get(k) for r in good] for k in NAMED),
            metric_line.LEFT_OUT: {i: names for i, r in enumerate(good)
                                   if (names := metric_line.left_out(r.get(metric_line.LEFT_OUT)))},
            "step": np.fromiter((r["step"] for r in good), np.int64, len(good)),
            "attempt": np.fromiter((a if metric_line.whole(a := r.get("attempt")) else 0 for r in good),
                                   np.int64, len(good))}
    cols.update(floats)
    return fold_loss(cols), len(records) - len(good)


def _fits(value) -> bool:
    """False for a number no float can hold (a 400-digit integer): its record is quarantined."""
    try:
        _num(value)
    except OverflowError:
        return False
    return True


class MetricsStore:
    def __init__(self, *, max_points_per_task: int = DEFAULT_MAX_POINTS,
                 max_points: int = DEFAULT_BUDGET, min_points: int = MIN_POINTS) -> None:
        self._lock = threading.Lock()
        self._min = int(min_points)
        self._cap = self._max_cap = max(16, int(max_points_per_task))
        self._budget = int(max_points)
        self._series: list[_Task] = []   # every series, for the budget's shares
        self._tasks: dict[str, _Task] = {}
        self._global = self._new_series(("step", "time", "loss"))
        self.rejected = 0       # records without a task name or an integer step
        self.version = 0        # bumps on every change: a cheap "redraw needed?" check
        self.nonfinite: dict[str, tuple[int, float]] = {}   # task -> first NaN/Inf loss (step, value)
        self._waits: dict[str, list[float]] = {}      # task -> its last WAIT_WINDOW input_wait shares
        self._first: dict[str, tuple[int, float]] = {}   # task -> (attempt, hash of its first batch)
        self.dropped_names = 0  # lines of task names past the first MAX_TASKS
        self.dropped_long = 0   # lines whose task name is longer than MAX_TASK_NAME
        self._named = NamedSeries(self._new_series)   # accuracy, val_loss ... per task and global
        self._left_out: dict[str, list[str]] = {}   # task -> names its job's writer left out

    def add(self, record: Mapping) -> int:
        return self.add_many((record,))

    def add_many(self, records: Iterable[Mapping]) -> int:
        """Store new records; return how many were kept (replays and bad records are not)."""
        cols, bad = records_to_columns(records)
        with self._lock:
            self.rejected += bad
        return self.add_columns(cols)

    def add_columns(self, cols: Mapping) -> int:
        """The fast path: ``task`` (a list of names), ``step`` and ``attempt`` (int64 arrays), and
        float64 arrays for time, loss, global_loss, step_time, examples_per_sec (NaN if absent),
        one row per record in arrival order. Rows are grouped by task with numpy, not a loop.
        A reader that has the task names dictionary-encoded already (pyarrow) may give
        ``task`` as (names, int64 codes into them) instead of a list."""
        if isinstance(cols["task"], tuple):
            names, codes = cols["task"]
            ids = {name: k for k, name in enumerate(names)}
        else:
            ids = {}
            codes = np.fromiter((ids.setdefault(t, len(ids)) for t in cols["task"]), np.int64,
                                len(cols["task"]))
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(ids) + 1))
        attempt = cols["attempt"]
        kept = 0
        accepted = np.ones(len(codes), bool)
        with self._lock:
            for name, k in ids.items():
                rows = order[bounds[k]:bounds[k + 1]]
                t = self._task(name, len(rows))
                if t is None:
                    accepted[rows] = False
                    continue
                kept += t.add(attempt[rows], {f: cols[f][rows] for f in FIELDS})
                self._check_finite(name, cols["step"][rows], cols["loss"][rows])
                self._note_input(name, attempt[rows], cols, rows)
            g = np.flatnonzero(~np.isnan(cols["global_loss"]) & accepted)
            self._global.add(attempt[g], {"step": cols["step"][g], "time": cols["time"][g],
                                          "loss": cols["global_loss"][g]})
            kept += self._named.add(cols, attempt, accepted)
            if self._note_left_out(cols, accepted) or kept:
                self.version += 1
        return kept

    def _new_series(self, names: tuple[str, ...]) -> _Task:
        """A new series; every series' share of the budget is set again (module docstring)."""
        series = _Task(names, self._cap)
        self._series.append(series)
        share = self._budget // len(self._series)
        self._cap = min(self._max_cap, max(self._min, share))
        for t in self._series:
            t.cols.cap = self._cap   # thinned at its next append if it holds more
        return series

    @property
    def dropped_metrics(self) -> int:
        """Values of names past metric_line.MAX_NAMES, or refused names."""
        return self._named.dropped

    @property
    def nonfinite_metrics(self) -> dict[str, tuple[str, int, float]]:
        """Task -> its first non-finite named value (name, step, value)."""
        return self._named.nonfinite

    def metric_names(self) -> list[str]:
        """Every metric the run reported, the loss first, then by name (val_x after x)."""
        with self._lock:
            names = self._named.names()
        return ["loss"] + sorted(names, key=lambda n: (n.removeprefix("val_"), n.startswith("val_")))

    def metric(self, name: str, task: str | None = None, *,
               x: str = "step") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of metric ``name`` for ``task``, or its global value when ``task``
        is None; ``x="time"`` gives wall-clock times instead of steps. Empty arrays where there
        is none. Read-only views."""
        with self._lock:
            if name == "loss":
                series = self._global if task is None else self._tasks.get(task)
                column = "loss"
            else:
                series = self._named.get(name, task)
                column = "value"
            if series is None:
                return np.empty(0, np.int64 if x == "step" else np.float64), np.empty(0)
            return series.cols.view(x), series.cols.view(column)

    def metric_tasks(self, name: str) -> list[str]:
        """The tasks that reported ``name`` per worker (none for a global-only metric)."""
        if name == "loss":
            return self.tasks()
        with self._lock:
            return sorted(self._named.tasks(name), key=_task_order)

    def _task(self, name: str, lines: int) -> _Task | None:
        """The series for ``name``, made when there is room; None (lines counted) when not."""
        t = self._tasks.get(name)
        if t is not None:
            return t
        if len(name) > MAX_TASK_NAME:
            self.dropped_long += lines
        elif len(self._tasks) >= MAX_TASKS:
            self.dropped_names += lines
        else:
            t = self._tasks[name] = self._new_series(FIELDS)
            return t
        self.version += 1   # the warning changed: redraw
        return None

    def warning(self) -> str:
        """What the store refused to keep, for the Monitor page; "" when nothing."""
        with self._lock:
            notes = []
            if self.dropped_names:
                notes.append(f"{self.dropped_names} metric line(s) of task names past the first "
                             f"{MAX_TASKS} dropped")
            if self.dropped_long:
                notes.append(f"{self.dropped_long} metric line(s) with a task name over "
                             f"{MAX_TASK_NAME} characters dropped")
            if self.dropped_metrics:
                notes.append(f"{self.dropped_metrics} metric value(s) dropped: a name that is not "
                             f"1-{metric_line.NAME_MAX} printable characters, a value that is not "
                             f"a number, or a name past the first {metric_line.MAX_NAMES}")
        if not notes:
            return ""
        return ("; ".join(notes) + " (each task name costs memory in the console). Write one "
                "task name per worker, such as the harness's chief-0, worker-1.")

    def _note_left_out(self, cols: Mapping, accepted: np.ndarray) -> bool:
        """Keep the names each task's lines say the writer left out (metric_line.LEFT_OUT), at
        most MAX_NAMES a task; whether any was new."""
        new = False
        tasks = cols["task"]
        for row, names in (cols.get(metric_line.LEFT_OUT) or {}).items():
            if not accepted[row]:
                continue
            task = tasks[0][tasks[1][row]] if isinstance(tasks, tuple) else tasks[row]
            known = self._left_out.setdefault(task, [])
            for name in names:
                if name not in known and len(known) < metric_line.MAX_NAMES:
                    known.append(name)
                    new = True
        return new

    def left_out(self) -> dict[str, list[str]]:
        """Task -> the metric names its job's writer left out of its lines, in task order."""
        with self._lock:
            return {t: list(self._left_out[t]) for t in sorted(self._left_out, key=_task_order)}

    def _check_finite(self, task: str, steps: np.ndarray, loss: np.ndarray) -> None:
        """Keep a task's first non-finite loss: the console flags it at once."""
        if task in self.nonfinite or np.isfinite(loss).all():
            return
        i = int(np.flatnonzero(~np.isfinite(loss))[0])
        self.nonfinite[task] = (int(steps[i]), float(loss[i]))

    def _note_input(self, task: str, attempt: np.ndarray, cols: Mapping, rows: np.ndarray) -> None:
        """Keep the task's recent input-wait shares and its newest attempt's first-batch hash."""
        wait = cols.get("input_wait")
        if wait is not None:
            recent = wait[rows][np.isfinite(wait[rows])]
            if len(recent):
                self._waits[task] = (self._waits.get(task, []) + recent[-WAIT_WINDOW:].tolist())[-WAIT_WINDOW:]
        first = cols.get("first_batch")
        if first is not None:
            hashed = np.flatnonzero(np.isfinite(first[rows]))
            if len(hashed):
                i = hashed[-1]
                if int(attempt[i]) >= self._first.get(task, (-1, 0.0))[0]:
                    self._first[task] = (int(attempt[i]), float(first[rows][i]))

    def input_wait(self) -> dict[str, float]:
        """Task -> share of each step it waits for data (mean of its last few sync points)."""
        with self._lock:
            waits = {t: sum(v) / len(v) for t, v in self._waits.items() if v}
        return {t: waits[t] for t in sorted(waits, key=_task_order)}

    def same_data(self) -> list[list[str]]:
        """Groups of tasks whose newest attempt's first batches hashed alike ([] when none)."""
        with self._lock:
            first = dict(self._first)
        if not first:
            return []
        newest = max(a for a, _ in first.values())
        by_hash: dict[float, list[str]] = {}
        for task, (attempt, value) in first.items():
            if attempt == newest:
                by_hash.setdefault(value, []).append(task)
        return sorted(sorted(g, key=_task_order) for g in by_hash.values() if len(g) > 1)

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
                    smoothing: float = 0.0, thin=None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) with at most about ``n`` points; smoothing is applied before.
        ``thin(x, y, n)`` picks the points (default: ``downsample``)."""
        s = self.series(task)
        y = getattr(s, field)
        if smoothing:
            y = ema(y, smoothing)
        return (thin or downsample)(s.step, y, n)

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
            every = list(self._tasks.values()) + [self._global] + self._named.every()
            return sum(a.nbytes for t in every for a in t.cols.cols.values())


def task_order(name: str):
    """chief-0, worker-1, worker-2, ..., worker-10: numbers sort as numbers (a sort key)."""
    role, _, index = name.rpartition("-")
    return (role, int(index)) if index.isdigit() else (name, -1)


_task_order = task_order


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
    # 1 - w**k is exactly 1.0 once w**k < 1e-17; computing the powers beyond that would run
    # through denormal floats, which made this ten times slower
    k = min(len(x), int(np.ceil(np.log(1e-17) / np.log(weight))) + 1)
    last[:k] /= 1.0 - weight ** np.arange(1, k + 1, dtype=np.float64)
    out[ok] = last
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
