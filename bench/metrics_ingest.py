"""Ingest 1,000,000 metric lines (64 workers x 15,625 steps) into the MetricsStore.

Measurements:
  store: raw metrics.jsonl lines -> parse_metric_block -> add_columns, 100,000 lines a batch
         (what RunMonitor does at each commit, and at start when it replays its mirror), once
         with pyarrow's JSON reader (the default for big batches) and once with the standard
         library only (json.loads of the batch joined into one array);
  e2e:   the same file already on disk when the agent starts (a console catching up on a long
         run): the watch agent -> pipe -> RunMonitor -> store, until the store holds every record.

With ``--metrics N`` every line also carries N named metrics per worker and N global values
(issue 34): run ``--metrics 0`` and ``--metrics 10`` side by side.

    python bench/metrics_ingest.py [--workers 64] [--steps 15625] [--metrics 0] [--e2e]
"""
from __future__ import annotations

import argparse
import gc
import os
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.watch.metrics import MetricsStore  # noqa: E402
from backend.watch import lines as parse  # noqa: E402


def lines(workers: int, steps: int, metrics: int = 0) -> list[bytes]:
    out = []
    for step in range(steps):
        for w in range(workers):
            task = "chief-0" if w == 0 else f"worker-{w}"
            named = ({"metrics": {f"metric_{k}": 1.0 / (1 + step + k) for k in range(metrics)},
                      "global": {f"metric_{k}": 1.0 / (2 + step + k) for k in range(metrics)}}
                     if metrics else {})
            out.append(json.dumps({**named, 
                "run_id": "20250101-120000-abcd", "attempt": 0, "task": task, "step": step,
                "epoch": step // 1000, "time": 1735732800.0 + step * 0.05,
                "loss": 2.0 / (1 + step * 0.001) + w * 1e-3, "global_loss": 2.0 / (1 + step * 0.001),
                "step_time": 0.05 + w * 1e-4, "examples_per_sec": 1280.0}).encode())
    return out


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_store(data: list[bytes], *, arrow: bool) -> None:
    parse.ARROW_MIN_LINES = 5000 if arrow else 10 ** 12
    gc.collect()
    before = rss_mb()
    store = MetricsStore()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(data), 100_000):
        store.add_columns(parse.parse_metric_block(b"".join(line + b"\n" for line in data[i:i + 100_000]))[0])
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    gc.collect()
    n = sum(len(store.series(t)) for t in store.tasks())
    n += sum(len(store.metric(m, t)[0]) for m in store.metric_names()[1:] for t in store.metric_tasks(m))
    print(f"store ({'pyarrow' if arrow else 'stdlib json'}): {n:,} records in {took:.2f} s "
          f"(CPU {cpu:.2f} s, all threads); store arrays {store.nbytes() / 2**20:.1f} MiB; "
          f"process RSS grew {rss_mb() - before:.1f} MiB")
    del store


def bench_e2e(data: list[bytes]) -> None:
    from backend.hosts.local import LocalTransport
    from backend.watch import RunMonitor
    from rig.watch_run import make_run
    tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    run = make_run(tmp / "run")
    (run / "metrics.jsonl").write_bytes(b"\n".join(data) + b"\n")
    store = MetricsStore()
    t0 = time.perf_counter()
    mon = RunMonitor(LocalTransport, str(run), str(tmp / "local"), store,
                     python=sys.executable).start()
    want = len(data)
    while sum(len(store.series(t)) for t in store.tasks()) < want:
        time.sleep(0.05)
    took = time.perf_counter() - t0
    mon.stop()
    print(f"e2e: {want:,} records through agent + pipe + monitor in {took:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--steps", type=int, default=15_625)
    ap.add_argument("--metrics", type=int, default=0, help="named metrics per line (issue 34)")
    ap.add_argument("--e2e", action="store_true")
    args = ap.parse_args()
    data = lines(args.workers, args.steps, args.metrics)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{len(data):,} lines, {sum(map(len, data)) / 2**20:.0f} MiB")
    bench_store(data, arrow=False)
    bench_store(data, arrow=True)
    if args.e2e:
        bench_e2e(data)


if __name__ == "__main__":
    main()
