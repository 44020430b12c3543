"""The rows workers exchange at a sync point, read by column name. Standard library only.

A row is a flat float vector (it rides in a collective); ``Columns`` names them and
``Row`` reads one back, so nothing counts indexes. A layout has plain head columns (task index,
timings, flags) and, per metric, its state: ``<name>/total`` and ``<name>/count``.

What the state holds, and why it sums: each replica's row going OUT of a sync step is the state
of its worker's window since the last sync point (the window so far, averaged over the worker's
replicas, plus this replica's own step). Summing the rows of a worker's replicas gives the
worker's state; summing every row gives the cluster's. So a worker's value is its total over its
count, and the global value is the summed totals over the summed counts
(``metric_line.from_state``): no second collective, and no mean of means.

- ``loss``: total = the sum of the per-step mean losses, count = steps (the harness's
  per-worker loss, as it always was; every worker counts the same steps).
- any other metric of ``metrics_fn``: total = the sum of the per-example values, count = the
  examples.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import metric_line

LOSS = metric_line.LOSS
# Head columns of a training sync row. first_batch goes in as a flag (1: hash this batch) and
# comes out as the hash (step_probe.maybe_fingerprint); learning_rate comes out of the step.
SYNC_HEAD = ("task_index", "step_time", "examples_per_sec", "save_flag", "input_wait",
             "first_batch", "learning_rate", "profile_steps")
VAL_HEAD = ("task_index",)     # a validation row: the task, then the states
# Head columns of a fit script's or a custom loop's meeting (client/sync.py): the step each
# worker proposes for the next one, as those meet on a schedule of their own. profile_steps: the
# chief's profile ask (harness/profiling.py), 0 on every other worker.
MEETING_HEAD = ("task_index", "step_time", "save_flag", "next_sync", "profile_steps")
VAL_PREFIX = "val_"
# Names the harness itself writes: a metrics_fn entry of that name would hide one of them.
RESERVED = (LOSS, metric_line.LEARNING_RATE, "step_time")


def total_col(name: str) -> str:
    return f"{name}/total"


def count_col(name: str) -> str:
    return f"{name}/count"


@dataclass(frozen=True)
class Columns:
    head: tuple
    metrics: tuple          # "loss" first, then the job's metrics in its order
    prefixes: tuple = ("",)   # ("", "val_"): each metric's state for training and validation

    @property
    def cols(self) -> tuple:
        return self.head + self.state_cols

    @property
    def state_cols(self) -> tuple:
        return tuple(c for p in self.prefixes for name in self.metrics
                     for c in (total_col(p + name), count_col(p + name)))

    def at(self, col: str) -> int:
        return self.cols.index(col)

    def vector(self, values: dict) -> list[float]:
        """A row from ``{column: value}``; columns not given are 0."""
        unknown = set(values) - set(self.cols)
        if unknown:
            raise KeyError(f"no such row columns: {sorted(unknown)}")
        return [float(values.get(c, 0.0)) for c in self.cols]

    def row(self, head: dict, states: dict | None = None) -> list[float]:
        """A row from its head ``{column: value}`` and ``{prefix+name: (total, count)}``."""
        values = dict(head)
        for name, (total, count) in (states or {}).items():
            values[total_col(name)], values[count_col(name)] = total, count
        return self.vector(values)

    def read(self, vector) -> "Row":
        values = [float(v) for v in vector]
        if len(values) != len(self.cols):
            raise ValueError(f"a row of {len(values)} values for {len(self.cols)} columns")
        return Row(dict(zip(self.cols, values)), self)

    def read_tasks(self, gathered) -> list["Row"]:
        """One row per task, in task order, from every replica's: a worker's replicas send the
        same row where the row is the worker's (a ``fit`` script's or a custom loop's meeting)."""
        by_task: dict = {}
        for values in gathered:
            if len(values) != len(self.cols):
                raise ValueError(f"tfconsole: a gathered row has {len(values)} columns, expected "
                                 f"{len(self.cols)} ({', '.join(self.cols[:6])}...): every "
                                 "worker must compile the same model and metrics")
            row = self.read(values)
            by_task.setdefault(row.task_index, row)
        return [by_task[i] for i in sorted(by_task)]


def sync_layout(metric_names=()) -> Columns:
    return Columns(SYNC_HEAD, (LOSS, *metric_names))


def val_layout(metric_names=()) -> Columns:
    return Columns(VAL_HEAD, (LOSS, *metric_names))


def meeting_layout(metric_names=()) -> Columns:
    """A ``fit`` script's or a custom loop's row: each metric for training and validation."""
    return Columns(MEETING_HEAD, tuple(metric_names), ("", VAL_PREFIX))


@dataclass(frozen=True)
class Row:
    values: dict
    layout: Columns | None = None

    def __getitem__(self, col: str) -> float:
        return self.values[col]

    @property
    def task_index(self) -> int:
        return int(self.values["task_index"])

    def state(self, name: str, prefix: str = "") -> tuple[float, float]:
        return self.values[total_col(prefix + name)], self.values[count_col(prefix + name)]

    def value(self, name: str, prefix: str = "") -> float:
        """Its own value: total over count (NaN where nothing was counted)."""
        return metric_line.from_state(*self.state(name, prefix))


@dataclass
class Folded:
    """A gathered set of rows, one entry per task: what the sync point reports."""
    values: dict            # task -> {metric: this worker's value}
    global_: dict           # metric -> global value (summed state)
    rows: dict              # task -> that task's replicas' rows

    def figure(self, task: str, col: str, how=max) -> float:
        """A head column for one task over its replicas (step time: the slowest replica)."""
        return how(r[col] for r in self.rows[task])


def fold(rows: list[Row], tasks: tuple, layout: Columns) -> Folded:
    """Per task and global values from every replica's row (a worker may have several)."""
    by_task: dict = {}
    for r in rows:
        by_task.setdefault(tasks[int(r["task_index"])], []).append(r)
    values = {task: _values(items, layout) for task, items in by_task.items()}
    return Folded(values=values, global_=_values(rows, layout), rows=by_task)


def _values(rows: list[Row], layout: Columns) -> dict:
    out = {}
    for name in layout.metrics:
        total = sum(r.state(name)[0] for r in rows)
        count = sum(r.state(name)[1] for r in rows)
        out[name] = metric_line.from_state(total, count)
    return out


def mean(values) -> float:
    """Examples/s of a task over its replicas."""
    values = list(values)
    return sum(values) / len(values)


def name_problems(names, *, validation: bool) -> list[str]:
    """Why the names a job's ``metrics_fn`` returns cannot be used (empty when they can)."""
    names, out = list(names), []
    for name in names:
        problem = metric_line.name_problem(name)
        if problem:
            out.append(problem)
        elif name in RESERVED:
            out.append(f"metric name {name!r} is the harness's own")
        elif name.startswith(VAL_PREFIX):
            out.append(f"metric name {name!r} starts with {VAL_PREFIX!r}, which the harness "
                       "gives validation values")
        elif validation and len(VAL_PREFIX + name) > metric_line.NAME_MAX:
            out.append(f"metric name {name[:20]!r}... is too long to carry the {VAL_PREFIX!r} "
                       f"prefix (at most {metric_line.NAME_MAX - len(VAL_PREFIX)} characters)")
    # A line carries the loss and every metric and, with validation, their val_ twins, plus
    # learning_rate.
    cap = (metric_line.MAX_NAMES - 2 - validation) // (2 if validation else 1)
    if len(names) > cap:
        out.append(f"{len(names)} metrics, at most {cap} (each is a series in the console)")
    return out
