"""Console CPU with a live run and the Monitor page open in a real browser (headless Chromium).

Starts ``streamlit run console/app.py``, launches a two-worker synthetic run on this machine,
opens Monitor, waits for the loss chart, then reads the Streamlit process's own CPU time
(/proc, user + system, every thread) over ``--seconds``: first while the run is live, then
after it is stopped (an ended run should cost nothing). The watch agent is a child process here
(the local transport) but runs on the chief's host in a real cluster: its CPU is shown apart.

It also counts the bytes the console sends the browser while the run is live.

    python bench/console_cpu.py [--seconds 60] [--log-every 10] [--tree OTHER_CHECKOUT]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from rig.sshd import free_port  # noqa: E402  (below the ephemeral range: no client takes it)

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def serve(runs: Path, log: Path, tree: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """The console as `streamlit run` starts it (from ``tree``: another checkout, to compare),
    and the URL that carries its login token."""
    from console import tokens
    token = tokens.new_token(tokens.token_path(runs))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "console/app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=tree, env=dict(os.environ, TFCONSOLE_RUNS=str(runs)), stdout=open(log, "wb"),
        stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read().strip() == b"ok":
                return proc, tokens.url(token, address="127.0.0.1", port=port)
        except OSError:
            time.sleep(0.3)
    raise SystemExit("streamlit did not start: " + log.read_text()[-2000:])


def goto(page, url: str, title: str) -> None:
    """Open the console and one of its pages; generous limits: a loaded machine is slow."""
    page.goto(url, timeout=300_000)
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click(timeout=300_000)
    page.get_by_role("heading", name=title).first.wait_for(timeout=300_000)


def measure(pid: int, seconds: float) -> tuple[float, float]:
    """(% of one core for the console process, % for its child processes: the watch agent)."""
    kids = children(pid)
    c0, k0, t0 = cpu_s(pid), {k: cpu_s(k) for k in kids}, time.time()
    time.sleep(seconds)
    c1, t1 = cpu_s(pid), time.time()
    k1 = {k: cpu_s(k) for k in kids if os.path.exists(f"/proc/{k}")}   # a stopped agent counts 0
    return 100 * (c1 - c0) / (t1 - t0), 100 * sum(k1[k] - k0[k] for k in k1) / (t1 - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--log-every", type=int, default=10, help="steps between metrics rows")
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the checkout whose console is served (e.g. a worktree of an older commit)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="console-cpu-"))
    proc, url = serve(tmp / "runs", tmp / "streamlit.log", args.tree)
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": free_port(),
         "python": sys.executable, "workdir": str(tmp / "host")} for _ in range(2)]})
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
                         "params": {"epochs": 1, "steps_per_epoch": 10 ** 6, "log_every": args.log_every}})
    store = RunStore(tmp / "runs")
    run = launcher.launch(cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    from playwright.sync_api import sync_playwright
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page()
            goto(page, url, "Monitor")
            page.locator(".js-plotly-plot").first.wait_for(timeout=300_000)
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .scatterlayer, "
                                   ".js-plotly-plot .gl-container').length > 0", timeout=300_000)
            time.sleep(10)   # past start-up: the steady state
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            port = int(url.split("?")[0].rstrip("/").rsplit(":", 1)[1])
            sent, ticks = bytes_sent(port), _ticks(page)
            live, agent = measure(proc.pid, args.seconds)
            rate = (bytes_sent(port) - sent) / args.seconds / 1024
            ticks = _ticks(page) - ticks
            # CPU per tick does not depend on the load: on a busy machine ticks can come late,
            # which lowers the % of a core without making a tick any cheaper.
            print(f"{ticks} chart ticks in {args.seconds:g} s (every {args.seconds / max(ticks, 1):.2f} s; "
                  f"due every 2 s): {10 * live * args.seconds / max(ticks, 1):.0f} ms of console CPU a tick")
            print(f"live run, Monitor open: console {live:.1f}% of a core; watch agent {agent:.1f}%; "
                  f"to the browser {rate:.1f} KiB/s; points per loss line at the end "
                  f"{_points(page)}; live charts (messages, whole figures, points received) "
                  f"{page.evaluate(FEED_JS)}")
            launcher.attach(run.run_id, store=store).stop(grace_s=5)
            time.sleep(15)   # the page notices the end
            ended, agent = measure(proc.pid, args.seconds)
            print(f"ended run, Monitor open: console {ended:.1f}% of a core; watch agent {agent:.1f}%")
            browser.close()
    finally:
        state = store.load(run.run_id)
        if state.live:
            launcher.attach(run.run_id, store=store).stop(grace_s=5)
        proc.terminate()
        proc.wait(10)


FEED_JS = ("() => Array.from(document.querySelectorAll('.tfconsole-chart'))"
           ".map(el => [Number(el.dataset.messages || 0), Number(el.dataset.whole || 0), Number(el.dataset.points || 0)])")


def bytes_sent(port: int) -> int:
    """Bytes the console has sent on its open connections (the browser's websocket): TCP's own
    count, from ``ss``. Playwright does not see Streamlit's websocket frames."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(m) for m in re.findall(r"bytes_sent:(\d+)", out))


def _ticks(page) -> int:
    """Messages the loss chart (the first) has received: one per Monitor tick that reached it."""
    return int(page.evaluate(FEED_JS)[0][0])


def _points(page) -> int:
    """Points of the longest line in the loss chart (the first chart on the page)."""
    return page.evaluate("() => Math.max(0, ...Array.from(document.querySelectorAll('.js-plotly-plot'))"
                         ".slice(0, 1).flatMap(el => (el._fullData || el.data || []).map(t => (t.x || []).length)))")


if __name__ == "__main__":
    main()
