"""Many workers on one chart: the spread across workers as a band, the odd ones out named.

Past MANY workers, one line per worker is unreadable and slow (64 workers: 195 plotly traces,
the browser 11-50 s behind the data). Operators look for the spread and the odd one
out, so a chart then draws the global curve, a band from the lowest to the highest worker at
each step, up to k workers that stand out from the median (by their recent level, beyond a
robust threshold: noise is not news), and any worker the operator picks. Pure: numpy in, plotly trace dicts out (no Streamlit here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.watch.metrics import MetricsStore, task_order

MANY = 8          # above this many workers a chart draws the band instead of every line
WORST_K = 3       # workers drawn by default on a crowded chart: the furthest from the median
OUTLIER_Z = 4.5   # robust deviations from the median that make a worker stand out
RECENT = 100      # a worker's level: the median of its last RECENT points (steady across redraws)
BAND_COLOR = "rgba(99, 110, 250, 0.18)"


@dataclass(frozen=True)
class Band:
    step: np.ndarray
    low: np.ndarray
    high: np.ndarray


def band(series: dict[str, tuple[np.ndarray, np.ndarray]]) -> Band:
    """Per step, the lowest and highest value over the workers that reported it. Workers report
    at the same steps (the chief writes every worker's line at each sync point): when every
    worker has the very same steps their values stack into the table as they are; otherwise a
    step grid of their union and one ``searchsorted`` per worker align them. It runs for every
    crowded chart at every Monitor tick, so no per-step median (64 workers x 30,000 points:
    a nanmedian was half of it, and no chart draws it)."""
    steps = [s for s, _ in series.values() if len(s)]
    if not steps:
        empty = np.empty(0)
        return Band(np.empty(0, np.int64), empty, empty)
    first = steps[0]
    if len(first) and bool(np.all(first[1:] > first[:-1])) and all(
            s is first or (len(s) == len(first) and np.array_equal(s, first)) for s in steps[1:]):
        grid = first
        table = np.stack([np.asarray(v, dtype=np.float64) for s, v in series.values() if len(s)])
    else:
        grid = np.unique(np.concatenate(steps))
        table = np.full((len(series), len(grid)), np.nan)
        for row, (s, v) in enumerate(series.values()):
            if len(s):
                table[row, np.searchsorted(grid, s)] = v
    with np.errstate(all="ignore"):
        finite = np.where(np.isfinite(table), table, np.nan)
        counted = np.isfinite(finite).any(axis=0)
        low = np.full(len(grid), np.nan)
        high = low.copy()
        low[counted] = np.nanmin(finite[:, counted], axis=0)
        high[counted] = np.nanmax(finite[:, counted], axis=0)
    return Band(grid, low, high)


def odd_ones(last: dict[str, float], k: int = WORST_K) -> list[str]:
    """Up to ``k`` workers that stand out: NaN/Inf first, then those whose level is further from
    the median of all workers than OUTLIER_Z robust deviations (the median absolute deviation,
    scaled to a standard deviation), furthest first. Workers that differ only by noise are
    none of them: the band shows them, and the chart does not swap lines at every redraw."""
    if not last:
        return []
    broken = [t for t, v in last.items() if not np.isfinite(v)]
    finite = {t: v for t, v in last.items() if np.isfinite(v)}
    out = sorted(broken, key=task_order)
    if len(finite) >= 3:
        values = np.array(list(finite.values()))
        mid = float(np.median(values))
        spread = 1.4826 * float(np.median(np.abs(values - mid)))
        far = {t: abs(v - mid) for t, v in finite.items()
               if abs(v - mid) > OUTLIER_Z * spread and abs(v - mid) > 1e-12 * max(1.0, abs(mid))}
        out += sorted(far, key=lambda t: (-far[t], task_order(t)))
    return out[:k]


def level(values: np.ndarray) -> float:
    """A worker's recent level: the median of its last RECENT points. Judged on one point, the
    odd ones out change at every redraw with the noise, and each change re-sends whole lines;
    a median over a window that moves by a few points per redraw keeps them steady. NaN/Inf in
    the window make the level that value: a broken worker stands out at once."""
    recent = np.asarray(values[-RECENT:], dtype=np.float64)
    if not len(recent):
        return np.nan
    bad = recent[~np.isfinite(recent)]
    return float(bad[-1]) if len(bad) else float(np.median(recent))


def last_values(store: MetricsStore, name: str) -> dict[str, float]:
    """Each worker's recent level of ``name`` (``level``)."""
    out = {}
    for task in store.metric_tasks(name):
        _, values = store.metric(name, task)
        if len(values):
            out[task] = level(values)
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
        odd = odd_ones(last, 1)
        if not odd:
            continue
        odd = odd[0]
        median = float(np.median([v for v in last.values() if np.isfinite(v)] or [np.nan]))
        lines.append(f"{name}: {odd} furthest from the median (recent {last[odd]:.4g} vs {median:.4g})")
    return lines
