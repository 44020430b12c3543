"""Time to build the per-worker loss figure from a full store: 64 workers x 100,000 points.

Includes everything a redraw does on the server: reading each series, optional smoothing,
MinMaxLTTB downsampling to 2,000 points a line, and building the plotly figure. ``to_json`` (what
Streamlit then sends) is timed apart.

    python bench/figure_build.py [--workers 64] [--points 100000] [--repeat 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from backend.watch.metrics import MetricsStore  # noqa: E402
from console.figures import loss_figure, step_time_figure  # noqa: E402


def filled(workers: int, points: int) -> MetricsStore:
    store = MetricsStore()
    rng = np.random.default_rng(0)
    steps = np.arange(points, dtype=np.int64)
    base = 2.0 / (1 + steps * 1e-3)
    for w in range(workers):
        n = points
        store.add_columns({
            "task": ["chief-0" if w == 0 else f"worker-{w}"] * n, "step": steps,
            "attempt": np.zeros(n, np.int64), "time": steps * 0.05,
            "loss": base + rng.normal(0, 0.05, n), "global_loss": base,
            "step_time": 0.05 + rng.exponential(0.005, n), "examples_per_sec": np.full(n, 1280.0)})
    return store


def timed(fn, repeat: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    store = filled(args.workers, args.points)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{args.workers} workers x {args.points:,} points; median of {args.repeat}")
    loss_figure(store)   # first call imports plotly's validators: not what a redraw pays
    for label, fn in (("loss_figure", lambda: loss_figure(store)),
                      ("loss_figure smoothing=0.6", lambda: loss_figure(store, smoothing=0.6)),
                      ("step_time_figure", lambda: step_time_figure(store))):
        ms, fig = timed(fn, args.repeat)
        points = sum(len(t.x) for t in fig.data)
        print(f"{label}: {ms:.0f} ms, {len(fig.data)} traces, {points:,} points sent")
    ms, _ = timed(lambda: loss_figure(store).to_json(), args.repeat)
    print(f"loss_figure + to_json: {ms:.0f} ms")


if __name__ == "__main__":
    main()
