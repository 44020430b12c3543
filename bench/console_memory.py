"""Console memory over a long 64-worker run with Monitor open in a real browser (issue 37).

Starts the console as ``streamlit run`` does, launches a 64-task ``kind: command`` run over the
local transport whose chief writes a metrics line per worker every ``--interval`` seconds
(``bench/monitor_lag.py``'s reporter: the harness's own writer, no TensorFlow), opens Monitor in
headless Chromium and leaves it open. Every 10 s it reads the Streamlit process's resident memory
(VmRSS, /proc) and, beside it, how far the loss chart is behind the file (steps) and the load
average. At the end: RSS after the warm-up, final RSS and the slope after the warm-up (least
squares, MiB per 10 minutes). Samples go to ``--csv`` as they come.

    python bench/console_memory.py --minutes 30          # the figure
    python bench/console_memory.py --minutes 3 --warmup 1   # a smoke check
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.monitor_lag import launch, is_drawn, stop  # noqa: E402

TOP_JS = """() => { const el = document.querySelector('.tfconsole-chart'); let top = -1;
  for (const t of (el && el.data) || []) { const x = t.x || []; if (x.length) top = Math.max(top, Number(x[x.length - 1])); }
  return top; }"""


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def last_step(metrics: Path) -> int:
    """The step of the file's last whole line (its tail only: the file grows to hundreds of MB)."""
    import json
    with open(metrics, "rb") as f:
        f.seek(max(0, metrics.stat().st_size - 4096))
        lines = f.read().splitlines()
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError):
            continue
    return -1


def slope_per_10min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (minutes, MiB), in MiB per 10 minutes."""
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return 10 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=5, help="minutes left out of the slope")
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between steps written")
    ap.add_argument("--every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args()
    from backend.runs.store import RunStore
    from bench.console_cpu import goto, serve
    from rig.browser import ARGS, CHROMIUM
    from playwright.sync_api import sync_playwright
    tmp = Path(tempfile.mkdtemp(prefix="console-memory-"))
    out = open(args.csv or tmp / "samples.csv", "w", buffering=1)
    out.write("minutes,rss_mib,steps_written,steps_on_chart,load1\n")
    proc, url = serve(tmp / "runs", tmp / "streamlit.log")
    store = RunStore(tmp / "runs")
    print(f"{args.workers} workers, a step every {args.interval} s, {args.minutes:g} minutes; "
          f"samples in {out.name}", flush=True)
    run = launch(store, args.workers, args.interval, tmp / "host")
    where = store.load(run.run_id).chief.remote_run_dir
    metrics = Path(os.path.expanduser(where if os.path.isabs(where) else f"~/{where}")) / "metrics.jsonl"
    samples: list[tuple[float, float]] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            goto(page, url, "Monitor")
            is_drawn(page)
            t0 = time.time()
            while (now := time.time()) - t0 < args.minutes * 60:
                minutes = (now - t0) / 60
                rss, load = rss_mib(proc.pid), os.getloadavg()[0]
                wrote, shown = last_step(metrics), int(page.evaluate(TOP_JS))
                samples.append((minutes, rss))
                out.write(f"{minutes:.2f},{rss:.1f},{wrote},{shown},{load:.1f}\n")
                print(f"{minutes:6.2f} min  RSS {rss:7.1f} MiB  steps written {wrote}, on the chart "
                      f"{shown} (behind {wrote - shown})  load average {load:.1f}", flush=True)
                time.sleep(max(0.0, t0 + len(samples) * args.every - time.time()))
            browser.close()
    finally:
        stop(store, run)
        proc.terminate()
        proc.wait(10)
    warm = [s for s in samples if s[0] >= args.warmup]
    last = [s for s in samples if s[0] >= samples[-1][0] - 10]
    lines = sum(1 for _ in open(metrics, "rb"))
    print(f"warm-up ({args.warmup:g} min) RSS {warm[0][1]:.1f} MiB; final {samples[-1][1]:.1f} MiB; "
          f"max after warm-up {max(s[1] for s in warm):.1f} MiB; slope after warm-up "
          f"{slope_per_10min(warm):+.1f} MiB per 10 min (last 10 min: {slope_per_10min(last):+.1f}); start {samples[0][1]:.1f} MiB; "
          f"{lines} metrics lines written", flush=True)


if __name__ == "__main__":
    main()
