"""Many workers (issue 37): a crowded chart draws the spread as a band, names the odd ones out
and the workers the operator picks, and the store's memory stays within its stated bound however
long the run and however many workers and metrics."""
from __future__ import annotations

import numpy as np

from backend.watch.metrics import MetricsStore
from console import crowd, figures

WORKERS = [f"worker-{i}" for i in range(64)]


def crowd_store(steps: range, *, odd: str = "worker-17", slow: str = "worker-40",
                behind: str | None = None, store: MetricsStore | None = None) -> MetricsStore:
    store = store or MetricsStore()
    records = []
    for step in steps:
        for i, task in enumerate(WORKERS):
            if task == behind and step > steps[0] + 5:
                continue
            loss = 1.0 / step + 0.001 * i + (0.5 if task == odd else 0.0)
            records.append({"task": task, "step": step, "time": float(step), "loss": loss,
                            "global_loss": 1.0 / step, "step_time": 0.3 if task == slow else 0.1,
                            "examples_per_sec": 10.0,
                            "metrics": {f"m{k}": loss * k for k in range(10)},
                            "global": {f"m{k}": k / step for k in range(10)}})
    store.add_many(records)
    return store


def test_a_crowded_chart_draws_the_band_the_odd_ones_out_and_picked_workers():
    store = crowd_store(range(1, 51))
    fig = figures.loss_figure(store)
    names = [t.name for t in fig.data]
    assert names[:2] == ["lowest worker", "range of 64 workers"] and fig.data[1].fill == "tonexty"
    assert "worker-17" in names                        # the odd one out is drawn by default
    assert len(fig.data) <= 2 + crowd.WORST_K + 1      # band, the k oddest, global: not 64 lines
    band_high = np.asarray(fig.data[1].y, dtype=float)
    assert band_high[-1] == max(1 / 50 + 0.001 * i + (0.5 if i == 17 else 0) for i in range(64))
    picked = figures.loss_figure(store, show=["worker-5"])
    assert "worker-5" in [t.name for t in picked.data]
    few = crowd_store(range(1, 11))
    assert len(figures.metric_figure(few, "m3").data) <= 7


def test_the_odd_ones_out_are_named_slowest_behind_and_furthest_from_the_median():
    store = crowd_store(range(1, 51), behind="worker-9")
    lines = crowd.outlier_lines(store, names=["loss", "m2"])
    text = "; ".join(lines)
    assert "slowest: worker-40 (x3.00 the median step time)" in text
    assert "behind: worker-9 (last step 6, others up to 50)" in text
    assert "loss: worker-17 furthest from the median" in text
    step_time = figures.step_time_figure(store)
    assert "worker-40" in [t.name for t in step_time.data]


def test_memory_stays_within_the_budget_however_long_the_run():
    store = MetricsStore(max_points=200_000, min_points=100)   # small shares: thinned in seconds
    sizes = []
    for chunk in range(6):
        crowd_store(range(1 + 200 * chunk, 201 + 200 * chunk), store=store)
        sizes.append(store.nbytes())
    series = 64 + 1 + 10 * 64 + 10       # tasks, global loss, named per task and global
    # the stated bound: the budget at 60 bytes a point, plus each series' first allocation
    bound = max(200_000, series * 100) * 60 + series * 1024 * 40
    assert max(sizes) <= bound, (sizes, bound)
    assert sizes[-1] <= sizes[2] * 1.1    # flat once each series is at its share
    steps, _ = store.metric("m3", "worker-3")
    assert steps[-1] == 1200 and steps[0] == 1    # thinned, not cut: the whole run is still there


def test_workers_that_differ_only_by_noise_are_not_singled_out():
    """Without a worker that stands out, a crowded chart is the band and the global curve: no
    worker line that would change at every redraw with the noise."""
    store = crowd_store(range(1, 51), odd=None, slow=None)
    names = [t.name for t in figures.loss_figure(store).data]
    assert names == ["lowest worker", "range of 64 workers", "global (mean of workers)"]
    assert crowd.outlier_lines(store, names=["loss"]) == []
    broken = crowd.odd_ones({"worker-1": 1.0, "worker-2": float("nan"), "worker-3": 1.1})
    assert broken == ["worker-2"]


def test_the_band_is_the_same_whether_workers_share_their_steps_or_not():
    """The band's two ways (workers at the very same steps: stacked; otherwise aligned on the
    union of steps) draw the same spread, a worker's NaN or missing step left out."""
    steps = np.arange(1, 201)
    rng = np.random.default_rng(0)
    same = {f"worker-{i}": (steps, rng.random(200)) for i in range(12)}
    same["worker-3"][1][50] = np.nan
    together = crowd.band(same)
    # worker-5 missed step 100 (and its step 99 is its last before it): the union path
    apart = dict(same, **{"worker-5": (np.delete(steps, 99), np.delete(same["worker-5"][1], 99))})
    aligned = crowd.band(apart)
    assert np.array_equal(together.step, steps) and np.array_equal(aligned.step, steps)
    values = np.array([v for _, v in same.values()])
    assert np.array_equal(together.low, np.nanmin(values, axis=0))
    assert np.array_equal(together.high, np.nanmax(values, axis=0))
    others = np.delete(values, 5, axis=0)[:, 99]
    assert aligned.high[99] == np.nanmax(others) and aligned.low[99] == np.nanmin(others)
    assert np.array_equal(np.delete(aligned.high, 99), np.delete(together.high, 99))
