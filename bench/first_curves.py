"""Start -> two loss curves on screen, in a real browser (headless Chromium), on the default demo.

Each round: press Start on the Launch page (the built-in default: two local workers, the
synthetic job), open Monitor at once, and time until the loss chart draws a curve for each of
the two workers. The floor, measured in the same round: two bare TensorFlow processes
(``examples/tf_config_script.py``, started together with their TF_CONFIG) until both print
step 1. Medians of ``--rounds``.

    python bench/first_curves.py [--rounds 3] [--tree OTHER_CHECKOUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.console_cpu import free_port, goto, serve  # noqa: E402
from tests.e2e.browser import ARGS, CHARTS_JS, CHROMIUM, start  # noqa: E402


def floor() -> float:
    """Seconds until two bare TensorFlow workers (MultiWorkerMirroredStrategy) both finish step 1."""
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "examples" / "tf_config_script.py"), "--steps", "2"],
                              env=dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2",
                                       TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for i in range(2)]
    for proc in procs:
        for line in proc.stdout:
            if b" step 1 " in line:
                break
    took = time.perf_counter() - t0
    for proc in procs:
        proc.wait(60)
    return took


def two_curves(page, timeout_s: float = 600) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        charts = page.evaluate(CHARTS_JS)
        if charts:
            drawn = [t for t in charts[0] if t["name"] and not t["name"].startswith("global") and t["y"]]
            if len(drawn) >= 2:
                return
        page.wait_for_timeout(100)
    raise SystemExit("no two curves within the time limit")


def one_round(page, url: str, runs: Path) -> float:
    from backend.runs.launcher import attach
    from backend.runs.store import RunStore
    goto(page, url, "Launch")
    t0, wall0 = time.perf_counter(), time.time()
    start(page)
    clicked = time.perf_counter() - t0
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Monitor", exact=True).click(timeout=300_000)
    two_curves(page)
    took = time.perf_counter() - t0
    for state in RunStore(runs).list():
        if state.live:
            attach(state.run_id, store=RunStore(runs)).stop(grace_s=5)
    newest = max(RunStore(runs).list(), key=lambda s: s.created)
    print(f"  where the time went: Start returned {clicked:.1f} s; " + _milestones(newest, wall0)
          + f"; two curves drawn {took:.1f} s", flush=True)
    return took


def _milestones(state, wall0: float) -> str:
    """When the run was recorded, when the chief's first metrics row was written (its own clock),
    each relative to the Start click."""
    folder = Path(os.path.expanduser(state.chief.remote_run_dir if os.path.isabs(state.chief.remote_run_dir)
                                     else f"~/{state.chief.remote_run_dir}"))
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()[:2]]
    return (f"run recorded {state.created - wall0:.1f} s; "
            f"first metrics row written {min(r['time'] for r in rows) - wall0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the checkout whose console is served (e.g. a worktree of an older commit)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="first-curves-"))
    proc, url = serve(tmp / "runs", tmp / "streamlit.log", args.tree)
    from playwright.sync_api import sync_playwright
    starts, floors = [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for _ in range(args.rounds):
                floors.append(floor())
                starts.append(one_round(page, url, tmp / "runs"))
                print(f"round: start -> two curves {starts[-1]:.1f} s; floor {floors[-1]:.1f} s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"median: start -> two curves {statistics.median(starts):.1f} s; "
          f"floor (two bare TF processes to step 1) {statistics.median(floors):.1f} s")


if __name__ == "__main__":
    main()
