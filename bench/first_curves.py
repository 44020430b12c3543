"""Start -> two loss curves on screen, in a real browser (headless Chromium), on the default demo.

Each round: press Start on the Launch page (the built-in default: two local workers, the
synthetic job), open Monitor as soon as the page answers (its progress line), and time until the
loss chart draws a curve for each of the two workers. The floor, measured in the same round: two
bare TensorFlow processes (``examples/tf_config_script.py``, started together with their
TF_CONFIG) until both print step 1. Medians of ``--rounds``. Each round also says where the time
went, from the click: the page's answer, Monitor showing the run, the run's record, the chief's
first metrics row (the host's clock: this machine), the first point and both curves drawn.

    python bench/first_curves.py [--rounds 3] [--tree OTHER_CHECKOUT]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.console_cpu import goto, serve  # noqa: E402
from rig.browser import ARGS, CHROMIUM, FEED_JS, button  # noqa: E402
from rig.sshd import free_port  # noqa: E402


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


class PortBusy(Exception):
    """The start failed: most often a default port still held (the floor's processes, others')."""


# When the loss chart (the first live chart) first drew a point of each line, from the page's own
# record (console/static/live_chart.js): milliseconds on this machine's clock.
FIRST_DRAWN_JS = "() => (document.querySelector('.tfconsole-chart') || {}).__firstDrawn || {}"


def two_curves(page, t0: float, wall0: float, runs: Path, timeout_s: float = 600) -> dict[str, float]:
    """Seconds from the click (``t0`` on the perf counter, ``wall0`` on the wall clock) until
    Monitor shows the run, the console holds the first metrics (its local mirror of them exists),
    the page draws a first point, then both curves. The draws are timed by the page itself, so
    this loop's own polling (every 0.2 s, a share of the same two cores) adds nothing to them."""
    seen: dict[str, float] = {}
    deadline = time.time() + timeout_s
    before = set(runs.glob("*/watch_mirror/metrics.jsonl"))
    while time.time() < deadline:
        if "held" not in seen and set(runs.glob("*/watch_mirror/metrics.jsonl")) - before:
            seen["held"] = time.perf_counter() - t0
        body = page.inner_text("body")
        if "Preflight failed" in body or re.search(r"Start of run \S+ failed", body):
            raise PortBusy(body)   # or another failure: one_round reads which
        if "shown" not in seen and re.search(r"Run \S+ — ", body):
            seen["shown"] = time.perf_counter() - t0
        if "step" not in seen and re.search(r"\bstep \d+ / \d+", body):   # the live panel's progress line
            seen["step"] = time.perf_counter() - t0
        drawn = sorted(ms / 1000 - wall0 for name, ms in page.evaluate(FIRST_DRAWN_JS).items()
                       if not name.startswith("global"))
        if len(drawn) >= 2:
            seen["first"], seen["two"] = drawn[0], drawn[1]
            feed = page.evaluate(FEED_JS)   # whole figures the loss chart got: 2+ means it resynced
            seen["whole"] = feed[0]["whole"] if feed else float("nan")
            return seen
        page.wait_for_timeout(200)
    raise SystemExit("no two curves within the time limit")


def one_round(page, url: str, runs: Path) -> tuple[float, float]:
    """(start -> two curves, first metrics row -> two curves), in seconds."""
    from backend.runs.launcher import attach
    from backend.runs.store import RunStore
    for _ in range(6):
        goto(page, url, "Launch")
        t0, wall0 = time.perf_counter(), time.time()
        button(page, "Start").click(timeout=30_000)
        # The page's first answer: the start's progress line (older trees: its outcome).
        page.get_by_text(re.compile(r"start \S+: working|Run \S+ started|Preflight failed")).first \
            .wait_for(timeout=300_000)
        answered = time.perf_counter() - t0
        page.locator('[data-testid="stSidebarNav"]').get_by_text("Monitor", exact=True).click(timeout=300_000)
        try:
            seen = two_curves(page, t0, wall0, runs)
            break
        except PortBusy as failed:
            goto(page, url, "Launch")   # it shows the failed preflight's table
            said = str(failed) + page.inner_text("body")
            # A default port taken between the preflight and the start (another program's
            # TensorFlow) fails the start itself: "Could not start gRPC server".
            if "is in use" not in said and "Could not start gRPC server" not in said:
                raise SystemExit("the start failed:\n" + said[-3000:])
            page.wait_for_timeout(10_000)
    else:
        raise SystemExit("the default ports stayed in use")
    for state in RunStore(runs).list():
        if state.live:
            attach(state.run_id, store=RunStore(runs)).stop(grace_s=5)
    newest = max(RunStore(runs).list(), key=lambda s: s.created)
    recorded, first_row = _milestones(newest, wall0)
    print(f"  where the time went: page answered {answered:.1f} s; Monitor showed the run "
          f"{seen.get('shown', float('nan')):.1f} s; run recorded {recorded:.1f} s; first metrics row "
          f"written {first_row:.1f} s; the console held it {seen.get('held', float('nan')):.1f} s; the page said its step "
          f"{seen.get('step', float('nan')):.1f} s; first point drawn {seen['first']:.1f} s; two curves drawn "
          f"{seen['two']:.1f} s (console's share after the row {seen['two'] - first_row:.1f} s; whole "
          f"figures sent to the loss chart by then: {seen['whole']:g})", flush=True)
    return seen["two"], seen["two"] - first_row


def _milestones(state, wall0: float) -> tuple[float, float]:
    """When the run was recorded and the chief's first metrics row was written (its own clock),
    each in seconds from the Start click."""
    folder = Path(os.path.expanduser(state.chief.remote_run_dir if os.path.isabs(state.chief.remote_run_dir)
                                     else f"~/{state.chief.remote_run_dir}"))
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()[:2]]
    return state.created - wall0, min(r["time"] for r in rows) - wall0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the checkout whose console is served (e.g. a worktree of an older commit)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="first-curves-"))
    proc, url = serve(tmp / "runs", tmp / "streamlit.log", args.tree)
    from playwright.sync_api import sync_playwright
    starts, floors, shares = [], [], []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for _ in range(args.rounds):
                floors.append(floor())
                took, share = one_round(page, url, tmp / "runs")
                starts.append(took)
                shares.append(share)
                print(f"round: start -> two curves {starts[-1]:.1f} s; floor {floors[-1]:.1f} s; "
                      f"over the floor {starts[-1] - floors[-1]:.1f} s (load average {os.getloadavg()[0]:.1f})",
                      flush=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"median: start -> two curves {statistics.median(starts):.1f} s; "
          f"floor (two bare TF processes to step 1) {statistics.median(floors):.1f} s; "
          f"over the floor (per round) {statistics.median(a - b for a, b in zip(starts, floors)):.1f} s; "
          f"first metrics row -> two curves {statistics.median(shares):.1f} s")


if __name__ == "__main__":
    main()
