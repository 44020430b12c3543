"""The Runs page's work per click with long runs (issue 37 item 5): 4 runs of 200,000 metric rows.

Each click on the Runs page (pick a run, move the smoothing slider) runs the page again: it
builds the runs table (every run's last and best metrics) and the compared runs' curves. Timed
side by side in one process:

  before: what the page did until this session, per click: every compared run's mirror read
          line by line with json.loads into a fresh MetricsStore;
  first:  this session's path on its first click: summary.from_mirror parses each mirror once
          (pyarrow, columns), then the table and the curves;
  click:  every later click: the parsed stores come from the cache (same file version).

--live N: the runs are live: before each later click every run's mirror grows by N rows (a
64-worker run logging every step adds about 64 rows a step), timed two ways in the same round:

  live click:       the page now: only the added lines are parsed, into the cached store;
  live, whole file: the page until issue 37 item 5: a grown file parsed again from its start.

    python bench/runs_page.py [--runs 4] [--rows 200000] [--metrics 3] [--rounds 3] [--live N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.watch import summary  # noqa: E402
from backend.watch.metrics import MetricsStore  # noqa: E402


def write_mirror(run_dir: Path, rows: int, metrics: int, start: int = 0) -> None:
    """``rows`` lines from row ``start`` on, appended (a fresh file when ``start`` is 0)."""
    path = summary.mirror_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if start else "w") as fh:
        for i in range(start, start + rows):
            step, task = i // 2 + 1, f"worker-{i % 2}"
            loss = 2.0 / (1 + step * 1e-3)
            named = {f"metric_{k}": loss * (k + 1) for k in range(metrics)}
            fh.write(json.dumps({"task": task, "step": step, "attempt": 0, "time": 1e9 + step,
                                 "loss": loss, "global_loss": loss, "step_time": 0.01,
                                 "examples_per_sec": 100.0, "metrics": named, "global": named}) + "\n")


def before(run_dirs: list[Path]) -> None:
    """The old page: two compared runs parsed line by line on every click."""
    for run_dir in run_dirs[:2]:
        store = MetricsStore()
        records = []
        with open(summary.mirror_path(run_dir), "rb") as fh:
            for line in fh:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        store.add_many(records)
        store.global_loss()


def now(run_dirs: list[Path]) -> None:
    """This session's page: every run's summary for the table, two runs' curves."""
    for run_dir in run_dirs:
        summary.summarize(summary.from_mirror(run_dir))
    for run_dir in run_dirs[:2]:
        summary.from_mirror(run_dir).metric("metric_0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--metrics", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--live", type=int, default=0, metavar="N",
                    help="rows added to every run's mirror before each live click")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="runs-page-bench-"))
    dirs = [tmp / f"run-{i}" for i in range(args.runs)]
    for d in dirs:
        write_mirror(d, args.rows, args.metrics)
    print(f"{args.runs} runs x {args.rows:,} rows x {args.metrics} metrics; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    times: dict[str, list[float]] = {"before (per click)": [], "first click": [], "later click": []}
    for _ in range(args.rounds):
        summary._cache.clear()
        for label, fn in (("before (per click)", before), ("first click", now), ("later click", now)):
            t0, c0 = time.perf_counter(), time.process_time()
            fn(dirs)
            times[label].append((time.perf_counter() - t0, time.process_time() - c0))
    if args.live:
        live(dirs, args, times)
    for label, got in times.items():
        wall = statistics.median(w for w, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(f"  {label:20s} median {wall:7.3f} s wall, {cpu:7.3f} s CPU over {args.rounds} rounds")


def live(dirs: list[Path], args, times: dict) -> None:
    """Clicks on runs that grow between them: only the new lines parsed vs the whole file."""
    rows = args.rows
    times.update({"live click": [], "live, whole file": []})
    summary._cache.clear()
    now(dirs)
    for _ in range(args.rounds):
        for label in ("live click", "live, whole file"):
            for d in dirs:
                write_mirror(d, args.live, args.metrics, start=rows)
            rows += args.live
            if label == "live, whole file":
                summary._cache.clear()     # what a grown file's new version cost before
            parsed = summary.bytes_parsed
            t0, c0 = time.perf_counter(), time.process_time()
            now(dirs)
            times[label].append((time.perf_counter() - t0, time.process_time() - c0))
            print(f"  {label:20s} {rows:,} rows a run, parsed {summary.bytes_parsed - parsed:,} bytes")
    summary._cache.clear()


if __name__ == "__main__":
    main()
