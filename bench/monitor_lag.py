"""Monitor lag and page switch at 64 vs 4 workers, in a real browser (headless Chromium) (issue 37).

A run is launched through the real launcher as a ``kind: command`` job over the local transport:
one task per worker, so the console watches it exactly as a real run (watch agent, journal
mirror, store, Monitor). The chief runs this file with ``--report``: it writes, every
``--interval`` seconds, one metrics line per worker for the next step through the harness's own
writer (``backend/client/harness/report.py``); the other tasks only sleep. No TensorFlow.

In each round, for 4 and then 64 workers (alternating which goes first), Monitor is opened and,
over ``--seconds``, a script in the page notes when the loss chart first holds each step: the lag
of a step is that moment minus the ``time`` its line carries (the writer's clock; same machine).
Then ``--switches`` page switches: Monitor -> Runs (until the page is drawn down to its
"Compare two runs" part) -> Monitor (until the loss chart holds points again). The load average
is printed beside every figure.

    python bench/monitor_lag.py [--rounds 2] [--seconds 40] [--interval 0.05] [--switches 3]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# In the page: every 50 ms, the highest step the loss chart (Monitor's first live chart) holds;
# one [seconds since the epoch, step] pair each time it grows. Survives page switches (one
# window: Streamlit switches pages without reloading).
OBSERVE_JS = """() => {
  if (window.__lag) return;
  window.__lag = [];
  setInterval(() => {
    const el = document.querySelector('.tfconsole-chart');
    if (!el || !el.data) return;
    let top = -1;
    for (const t of el.data) { const x = t.x || []; if (x.length) top = Math.max(top, Number(x[x.length - 1])); }
    const seen = window.__lag;
    if (top > (seen.length ? seen[seen.length - 1][1] : -1)) seen.push([Date.now() / 1000, top]);
  }, 50);
}"""
HELD_JS = """() => { const el = document.querySelector('.tfconsole-chart');
  return el && el.data ? el.data.reduce((n, t) => n + (t.x || []).length, 0) : 0; }"""


# -- the reporter: runs as the command job's tasks ------------------------------------------------

def report(interval: float) -> None:
    """The chief writes a line per worker per step; the other tasks sleep until stopped."""
    if os.environ.get("TFCONSOLE_IS_CHIEF") != "1":
        os.execvp("sleep", ["sleep", "infinity"])
    sys.path.insert(0, str(ROOT))
    from backend.client.harness.report import MetricsReporter
    tasks = os.environ["BENCH_TASKS"].split(",")
    odd = tasks[len(tasks) // 3]                      # one worker stands out: crowd mode names it
    rng = random.Random(0)
    out = MetricsReporter(os.environ["TFCONSOLE_RUN_DIR"], os.environ["TFCONSOLE_RUN_ID"],
                          int(os.environ.get("TFCONSOLE_ATTEMPT") or 0))
    step, due = 0, time.time()
    while True:
        step += 1
        now = time.time()
        mean = 2.0 / (1.0 + 0.01 * step)
        for task in tasks:
            loss = mean * (1.0 + 0.05 * rng.random()) + (0.5 if task == odd else 0.0)
            out.log(task, step, 0, metrics={"loss": loss}, global_metrics={"loss": mean},
                    step_time=interval, examples_per_sec=64 / interval, now=now)
        due += interval
        time.sleep(max(0.0, due - time.time()))
        due = max(due, time.time() - interval)        # late: go on from now, no burst


# -- the benchmark --------------------------------------------------------------------------------

def launch(store, workers: int, interval: float, workdir: Path):
    """A ``workers``-task command run on this machine, one task per worker, as the console's
    Launch page would start it (preflight left out: it is the same at both sizes)."""
    from backend.config.spec import cluster_from_dict, job_from_dict
    from backend.runs import launcher
    from tests.sshd import free_port
    ports: set[int] = set()
    while len(ports) < workers:
        ports.add(free_port())
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": port,
         "python": sys.executable, "workdir": str(workdir)} for port in sorted(ports)]})
    job = job_from_dict({"kind": "command",
                         "command": [sys.executable, str(Path(__file__).resolve()), "--report",
                                     "--interval", str(interval)],
                         "env": {"BENCH_TASKS": ",".join(cluster.task_names())}})
    return launcher.launch(cluster, job, store=store, preflight=launcher.Preflight.SKIP)


def stop(store, run) -> None:
    from backend.runs import launcher
    launcher.attach(run.run_id, store=store).stop(grace_s=3)


def written(store, run_id: str) -> dict[int, float]:
    """Step -> the time its lines carry, from the chief's metrics file."""
    state = store.load(run_id)
    where = state.chief.remote_run_dir
    folder = Path(os.path.expanduser(where if os.path.isabs(where) else f"~/{where}"))
    steps: dict[int, float] = {}
    with open(folder / "metrics.jsonl") as f:
        for line in f:
            row = json.loads(line)
            steps.setdefault(row["step"], row["time"])
    return steps


def lags(steps: dict[int, float], seen: list, t0: float, t1: float) -> tuple[list[float], int]:
    """Each step written in [t0, t1 - 10 s]: first time the chart held it minus its time. Steps
    never shown count from their time to t1 (a lower bound) and are counted apart."""
    out, missing = [], 0
    for step, at in sorted(steps.items()):
        if not t0 <= at <= t1 - 10:
            continue
        shown = next((t for t, top in seen if top >= step), None)
        if shown is None:
            missing += 1
            shown = t1
        out.append(shown - at)
    return out, missing


def is_drawn(page, timeout_s: float = 300) -> None:
    """Until Monitor's loss chart holds points."""
    page.wait_for_function(f"() => ({HELD_JS})() > 0", timeout=timeout_s * 1000, polling=50)


def switch(page) -> tuple[float, float]:
    """Seconds Monitor -> Runs (drawn down to its compare part) and Runs -> Monitor (loss chart
    holds points)."""
    nav = page.locator('[data-testid="stSidebarNav"]')
    t0 = time.perf_counter()
    nav.get_by_text("Runs", exact=True).click(timeout=300_000)
    page.get_by_role("heading", name="Compare two runs").first.wait_for(timeout=300_000)
    t1 = time.perf_counter()
    nav.get_by_text("Monitor", exact=True).click(timeout=300_000)
    page.get_by_role("heading", name="Monitor").first.wait_for(timeout=300_000)
    is_drawn(page)
    return t1 - t0, time.perf_counter() - t1


def one_size(page, url: str, pid: int, store, workers: int, args, workdir: Path) -> dict:
    """One size's round. Beside the wall times (which a loaded machine stretches), the console
    process's own CPU: % of a core over the lag window and seconds per page switch."""
    from bench.console_cpu import cpu_s, goto
    run = launch(store, workers, args.interval, workdir)
    try:
        goto(page, url, "Monitor")            # a fresh session: the newest run is the current one
        is_drawn(page)
        page.evaluate("() => { window.__lag = null; }")
        page.evaluate(OBSERVE_JS)
        time.sleep(10)                        # past the first whole figure: the steady state
        load0, t0, c0 = os.getloadavg()[0], time.time(), cpu_s(pid)
        time.sleep(args.seconds)
        t1, load1, c1 = time.time(), os.getloadavg()[0], cpu_s(pid)
        seen = page.evaluate("() => window.__lag")
        to_runs, to_monitor = [], []
        for _ in range(args.switches):
            a, b = switch(page)
            to_runs.append(a)
            to_monitor.append(b)
        load2, c2 = os.getloadavg()[0], cpu_s(pid)
    finally:
        stop(store, run)
    lag, missing = lags(written(store, run.run_id), seen, t0, t1)
    return {"workers": workers, "lag": statistics.median(lag), "p90": _q(lag, 0.9), "max": max(lag),
            "steps": len(lag), "missing": missing, "to_runs": statistics.median(to_runs),
            "to_monitor": statistics.median(to_monitor),
            "switch": statistics.median(a + b for a, b in zip(to_runs, to_monitor)),
            "switches": [round(a + b, 2) for a, b in zip(to_runs, to_monitor)],
            "cpu": 100 * (c1 - c0) / (t1 - t0), "switch_cpu": (c2 - c1) / args.switches,
            "load": f"{min(load0, load1, load2):.1f}-{max(load0, load1, load2):.1f}"}


def _q(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def show(r: dict) -> str:
    return (f"{r['workers']:>3} workers: lag median {r['lag']:.2f} s (p90 {r['p90']:.2f}, max "
            f"{r['max']:.2f}; {r['steps']} steps, {r['missing']} never shown); page switch "
            f"{r['switch']:.2f} s (-> Runs {r['to_runs']:.2f} + -> Monitor {r['to_monitor']:.2f}; "
            f"each {r['switches']}); console CPU {r['cpu']:.0f} % of a core in the lag window, "
            f"{r['switch_cpu']:.2f} s a switch; load average {r['load']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=40, help="lag window per size and round")
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between steps written")
    ap.add_argument("--switches", type=int, default=3, help="page switches per size and round")
    ap.add_argument("--sizes", default="4,64", help="worker counts, compared first to last")
    ap.add_argument("--report", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.report:
        report(args.interval)
        return
    import tempfile
    sys.path.insert(0, str(ROOT))
    from backend.runs.store import RunStore
    from bench.console_cpu import serve
    from tests.e2e.browser import ARGS, CHROMIUM
    from playwright.sync_api import sync_playwright
    tmp = Path(tempfile.mkdtemp(prefix="monitor-lag-"))
    proc, url = serve(tmp / "runs", tmp / "streamlit.log")
    store = RunStore(tmp / "runs")
    sizes = tuple(int(n) for n in args.sizes.split(","))
    results: dict[int, list[dict]] = {n: [] for n in sizes}
    print(f"a step every {args.interval} s; {os.cpu_count()} cores", flush=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for i in range(args.rounds):
                for workers in (sizes if i % 2 == 0 else sizes[::-1]):
                    results[workers].append(one_size(page, url, proc.pid, store, workers, args, tmp / "host"))
                    print(f"round {i + 1}: " + show(results[workers][-1]), flush=True)
            browser.close()
    finally:
        for state in store.list():
            if state.live:
                stop(store, store.load(state.run_id))
        proc.terminate()
        proc.wait(10)
    few, many = ({k: statistics.median(r[k] for r in results[n]) for k in ("lag", "switch", "cpu", "switch_cpu")}
                 for n in (sizes[0], sizes[-1]))
    print(f"medians over rounds: lag {few['lag']:.2f} s at {sizes[0]} workers vs {many['lag']:.2f} s at {sizes[-1]} "
          f"({many['lag'] / few['lag']:.2f}x); page switch {few['switch']:.2f} vs {many['switch']:.2f} s "
          f"({many['switch'] / few['switch']:.2f}x); console CPU {few['cpu']:.0f} vs {many['cpu']:.0f} % of a core, "
          f"{few['switch_cpu']:.2f} vs {many['switch_cpu']:.2f} s a switch")


if __name__ == "__main__":
    main()
