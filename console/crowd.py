"""Many workers on one chart: the spread across workers as a band, the odd ones out named.

Past MANY workers, one line per worker is unreadable and slow (64 workers: 195 plotly traces,
the browser 11-50 s behind the data: issue 37). Operators look for the spread and the odd one
out, so a chart then draws the global curve, a band from the lowest to the highest worker at
each step, the k workers furthest from the median by their last value, and any worker the
operator picks. Pure: numpy in, plotly trace dicts out (no Streamlit here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.watch.metrics import MetricsStore, task_order

MANY = 8          # above this many workers a chart draws the band instead of every line
WORST_K = 3       # workers drawn by default on a crowded chart: the furthest from the median
BAND_COLOR = "rgba(99, 110, 250, 0.18)"


@dataclass(frozen=True)
class Band:
    step: np.ndarray
    low: np.ndarray
    high: np.ndarray
    median: np.ndarray


def band(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> Band:
    """Per step, the lowest, highest and median value over the workers that reported it.
    Workers report at the same steps (the chief writes every worker's line at each sync point),
    so a step grid of their union and one ``searchsorted`` per worker align them."""
    steps = [s for s, _ in series.values() if len(s)]
    if not steps:
        empty = np.empty(0)
        return Band(np.empty(0, np.int64), empty, empty, empty)
    grid = np.unique(np.concatenate(steps))
    table = np.full((len(series), len(grid)), np.nan)
    for row, (s, v) in enumerate(series.values()):
        if len(s):
            at = np.searchsorted(grid, s)
            table[row, at] = v
    with np.errstate(all="ignore"):
        finite = np.where(np.isfinite(table), table, np.nan)
        counted = np.isfinite(finite).any(axis=0)
        low = np.full(len(grid), np.nan)
        high, median = low.copy(), low.copy()
        low[counted] = np.nanmin(finite[:, counted], axis=0)
        high[counted] = np.nanmax(finite[:, counted], axis=0)
        median[counted] = np.nanmedian(finite[:, counted], axis=0)
    return Band(grid, low, high, median)


def odd_ones(last: dict[str, float], k: int = WORST_K) -> list[str]:
    """The ``k`` workers whose last value is furthest from the median of all workers' last
    values (NaN and Inf first: a broken worker is the oddest of all)."""
    values = {t: v for t, v in last.items()}
    finite = [v for v in values.values() if np.isfinite(v)]
    if not values:
        return []
    mid = float(np.median(finite)) if finite else 0.0
    def distance(t: str) -> float:
        v = values[t]
        return np.inf if not np.isfinite(v) else abs(v - mid)
    return sorted(values, key=lambda t: (-distance(t), task_order(t)))[:k]


def last_values(store: MetricsStore, name: str) -> dict[str, float]:
    out = {}
    for task in store.metric_tasks(name):
        _, values = store.metric(name, task)
        if len(values):
            out[task] = float(values[-1])
    return out


def outlier_lines(store: MetricsStore, *, names: list[str], k: int = WORST_K) -> list[str]:
    """Plain sentences naming the odd ones out: the slowest worker, the one stopped furthest
    behind, and per metric the worker furthest from the median (names are the job's: escape
    them where shown)."""
    lines = []
    ratios = store.stragglers()
    if len(ratios) > 1:
        slowest = max(ratios, key=ratios.get)
        if ratios[slowest] > 1.2:
            lines.append(f"slowest: {slowest} (x{ratios[slowest]:.2f} the median step time)")
    steps = {t: int(store.series(t).step[-1]) for t in store.tasks() if len(store.series(t))}
    if steps and min(steps.values()) < max(steps.values()):
        behind = min(steps, key=lambda t: (steps[t], task_order(t)))
        lines.append(f"behind: {behind} (last step {steps[behind]}, others up to {max(steps.values())})")
    for name in names:
        last = last_values(store, name)
        if len(last) < 3:
            continue
        odd = odd_ones(last, 1)[0]
        median = float(np.median([v for v in last.values() if np.isfinite(v)] or [np.nan]))
        lines.append(f"{name}: {odd} furthest from the median ({last[odd]:.4g} vs {median:.4g})")
    return lines
