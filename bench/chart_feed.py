"""Monitor's three metric charts, tick by tick, as a live run grows: whole figures vs only new points.

Replays a run into a ``MetricsStore`` (``--workers`` workers, ``--rows-per-tick`` new rows per
worker every 2 s tick, for ``--ticks`` ticks) and, after each tick, builds the loss, step-time
and throughput figures two ways, side by side:

  whole: what ``st.plotly_chart`` sends every tick, ``fig.to_json()`` of the MinMaxLTTB figures
         (at most 2,000 points a line), and the time to build and serialise them;
  feed:  what Monitor's live charts send, ``json.dumps`` of ``ChartFeed.update``'s message for the
         stably thinned figures, and the time to build, diff and serialise them.

Prints bytes and milliseconds per tick (median over the ticks, and over the last tenth, when
lines are long), and checks on the way that a browser applying the messages holds the same lines
as the figures.

With ``--metrics N`` every line also carries N named metrics per worker and their global
values (issue 34), and the charts are Monitor's: loss, step time, throughput and one per metric
(``monitor_view.snapshot``'s set). Run it with ``--metrics 0`` and ``--metrics 10`` side by side.

    python bench/chart_feed.py [--workers 2] [--rows-per-tick 300] [--ticks 200] [--metrics 0]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.watch.metrics import MetricsStore  # noqa: E402
from console import figures  # noqa: E402
from console.chart_feed import FULL, ChartFeed, plain, stable_thin  # noqa: E402

BUILDERS = (figures.loss_figure, figures.step_time_figure, figures.throughput_figure)


def add_tick(store: MetricsStore, workers: int, first_step: int, rows: int, rng,
             metrics: int = 0) -> None:
    steps = np.arange(first_step, first_step + rows)
    for w in range(workers):
        loss = 2.0 / np.sqrt(1 + steps) + rng.normal(0, 0.02, rows)
        step_time = 0.01 + rng.normal(0, 0.001, rows)
        store.add_many({"task": f"worker-{w}", "step": int(s), "time": float(s) * 0.01,
                        "loss": float(v), "step_time": float(t), "examples_per_sec": 32 / float(t),
                        **({"global_loss": float(v)} if w == 0 else {}),
                        **({"metrics": {f"metric_{k}": float(v) * k for k in range(metrics)},
                            "global": {f"metric_{k}": float(v) * k for k in range(metrics)}}
                           if metrics else {})}
                       for s, v, t in zip(steps, loss, step_time))


def builders(store: MetricsStore) -> list:
    """Monitor's charts for this store: the three fixed ones and one per named metric."""
    named = [lambda store, n=n, **kw: figures.metric_figure(store, n, **kw)
             for n in figures.chart_metrics(store) if n != "loss"]
    return list(BUILDERS) + named


def apply(held: list | None, msg: dict) -> list:
    """What the browser does with a message (console/static/live_chart.js)."""
    if msg["op"] == FULL:
        return [(t["x"], t["y"]) for t in msg["data"]]
    if msg["op"] != "delta":
        return held
    return [(x[d["drop"]:d["drop"] + d["keep"]] + d["x"], y[d["drop"]:d["drop"] + d["keep"]] + d["y"])
            for (x, y), d in zip(held, msg["traces"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rows-per-tick", type=int, default=300,
                    help="new metrics rows per worker per 2 s tick (300: 150 steps/s, a row a step)")
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--metrics", type=int, default=0, help="named metrics per line (issue 34)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    store = MetricsStore()
    add_tick(store, args.workers, 0, 1, rng, args.metrics)
    charts = builders(store)
    feeds = [ChartFeed() for _ in charts]
    held: list = [None] * len(charts)
    whole_b, whole_ms, feed_b, feed_ms = [], [], [], []
    for tick in range(args.ticks):
        add_tick(store, args.workers, 1 + tick * args.rows_per_tick, args.rows_per_tick, rng, args.metrics)
        t0 = time.perf_counter()
        whole = sum(len(build(store).to_json()) for build in charts)
        t1 = time.perf_counter()
        sent, figs, messages = 0, [], []
        for i, build in enumerate(charts):
            figs.append(build(store, thin=stable_thin))
            messages.append(feeds[i].update(plain(figs[-1])))
            sent += len(json.dumps(messages[-1]))
        t2 = time.perf_counter()
        for i, (fig, msg) in enumerate(zip(figs, messages)):   # outside the timing
            held[i] = apply(held[i], msg)
            want = [(np.asarray(t.x).tolist(), np.asarray(t.y, float).tolist()) for t in fig.data]
            assert held[i] == want, f"tick {tick}: the browser's lines differ from the figure"
        whole_b.append(whole)
        whole_ms.append(1000 * (t1 - t0))
        feed_b.append(sent)
        feed_ms.append(1000 * (t2 - t1))
    tail = max(1, args.ticks // 10)
    med = statistics.median
    rows = args.ticks * args.rows_per_tick
    import os
    print(f"{args.workers} workers, {args.metrics} named metrics, {len(charts)} charts, "
          f"{args.rows_per_tick} rows per worker per tick, {args.ticks} ticks ({rows} steps at the "
          f"end); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name, b, ms in (("whole figures", whole_b, whole_ms), ("only new points", feed_b, feed_ms)):
        print(f"  {name:16s} bytes/tick median {med(b) / 1024:8.1f} KiB (last tenth {med(b[-tail:]) / 1024:8.1f} KiB); "
              f"build+send ms/tick median {med(ms):6.1f} (last tenth {med(ms[-tail:]):6.1f})")
    print(f"  ratio, last tenth: {med(whole_b[-tail:]) / max(1, med(feed_b[-tail:])):.0f}x fewer bytes")


if __name__ == "__main__":
    main()
