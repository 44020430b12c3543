"""Named metrics' series (accuracy, val_loss, learning_rate ...: backend/client/harness/metric_line.py),
kept by the metrics store (metrics.py) beside its loss columns.

Per (metric, task) and per metric for the global value, each a (step, time, value) series made
by the store, so it has the same cap, budget share, replay and restart rules as the loss
columns: a validation line at a step that already has a training line adds its values. At most
metric_line.MAX_NAMES names a store; lines' values past it are dropped and counted (``dropped``,
in the store's ``warning()``).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from backend.client.harness.contract import metric_line

NAMED = (metric_line.MINE, metric_line.GLOBAL)   # a line's named values: columns of dicts (or None) per row
VALUE = ("step", "time", "value")


def named_columns(per_key) -> dict:
    """The rows' named values as columns: ``{"named": {(key, name): (values, present)}}`` with
    key "metrics" or "global", float64 values and a bool mask of the rows that carry the name,
    from per-row dicts (or None) of each key in NAMED, by metric_line's reader rules;
    ``skipped_named`` counts the entries it refused."""
    named: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    skipped = 0
    for key, values in zip(NAMED, per_key):
        values = list(values)
        for i, v in enumerate(values):
            if v is None:
                continue
            good, bad = metric_line.named(v)
            skipped += bad
            for name, value in good.items():
                col = named.get((key, name))
                if col is None:
                    col = named[(key, name)] = (np.full(len(values), np.nan), np.zeros(len(values), bool))
                col[0][i], col[1][i] = value, True
    return {"named": named, "skipped_named": skipped}


def fold_loss(cols: dict) -> dict:
    """The loss is a named value in a line (metric_line.py); the store keeps it in its own loss
    columns ("loss", "global_loss": metric_line.LEGACY, where older lines have it top-level).
    A line's named loss wins; a line without one keeps its top-level value. Both columnar
    readers (records_to_columns, lines._with_arrow) end here."""
    named = cols.get("named") or {}
    for column, key in metric_line.LEGACY.items():
        found = named.pop(key, None)
        if found is not None:
            values, present = found
            cols[column] = np.where(present, values, cols[column])
    return cols


class NamedSeries:
    """Metric -> task -> series, and metric -> its global series. No lock of its own: the
    store calls it under its lock."""

    def __init__(self, new_series) -> None:
        self._new_series = new_series   # the store's: a series with its share of the budget
        self._by_task: dict[str, dict] = {}   # metric -> task -> (step, time, value)
        self._global: dict = {}               # metric -> its global series
        self.dropped = 0   # values of names past metric_line.MAX_NAMES, or refused names
        self.nonfinite: dict[str, tuple[str, int, float]] = {}   # task -> first (name, step, value)

    def add(self, cols: Mapping, attempt: np.ndarray, accepted: np.ndarray) -> int:
        """The rows' named values (``named_columns``) into their (metric, task) and global
        series, a numpy selection per name and task: no loop over rows."""
        self.dropped += int(cols.get("skipped_named", 0))
        named = cols.get("named") or {}
        if not named:
            return 0
        if isinstance(cols["task"], tuple):
            names, codes = cols["task"]
        else:
            ids: dict[str, int] = {}
            codes = np.fromiter((ids.setdefault(t, len(ids)) for t in cols["task"]), np.int64,
                                len(cols["task"]))
            names = list(ids)
        kept = 0
        for (key, name), (values, present) in named.items():
            rows = np.flatnonzero(present & accepted)
            if not len(rows):
                continue
            if key == "global":   # every worker's line carries it: the replay rule keeps one
                kept += self._add_rows(name, None, rows, values, cols, attempt)
                continue
            order = rows[np.argsort(codes[rows], kind="stable")]
            cuts = np.flatnonzero(np.diff(codes[order])) + 1
            for part in np.split(order, cuts):
                kept += self._add_rows(name, names[int(codes[part[0]])], part, values, cols,
                                       attempt)
        return kept

    def _add_rows(self, name: str, task: str | None, rows: np.ndarray, values: np.ndarray,
                  cols: Mapping, attempt: np.ndarray) -> int:
        series = self._series(name, task)
        if series is None:
            self.dropped += len(rows)
            return 0
        data = {"step": cols["step"][rows], "time": cols["time"][rows], "value": values[rows]}
        if task is not None:
            self._check_finite(task, name, data)
        return series.add(attempt[rows], data)

    def _series(self, name: str, task: str | None):
        """The series of metric ``name`` for ``task`` (None: its global value), made when there
        is room for the name."""
        if name not in self._by_task:
            if len(self._by_task) >= metric_line.MAX_NAMES:
                return None
            self._by_task[name] = {}
        if task is None:
            if name not in self._global:
                self._global[name] = self._new_series(VALUE)
            return self._global[name]
        if task not in self._by_task[name]:
            self._by_task[name][task] = self._new_series(VALUE)
        return self._by_task[name][task]

    def _check_finite(self, task: str, name: str, data: dict) -> None:
        if task in self.nonfinite or np.isfinite(data["value"]).all():
            return
        i = int(np.flatnonzero(~np.isfinite(data["value"]))[0])
        self.nonfinite[task] = (name, int(data["step"][i]), float(data["value"][i]))

    def names(self) -> list[str]:
        """Every name reported, in arrival order."""
        return list(self._by_task)

    def get(self, name: str, task: str | None):
        """The series of ``name`` for ``task`` (None: the global one), or None."""
        return self._global.get(name) if task is None else self._by_task.get(name, {}).get(task)

    def tasks(self, name: str) -> list[str]:
        """The tasks that reported ``name`` per worker, in arrival order."""
        return list(self._by_task.get(name, {}))

    def every(self) -> list:
        """Every series, for the store's memory figure."""
        return list(self._global.values()) + [t for by_task in self._by_task.values()
                                              for t in by_task.values()]
