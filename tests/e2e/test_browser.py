"""The whole console in a real browser: start two local workers, watch the loss fall, save, export,
stop, and check with ps that no worker is left. Screenshots of every page go to
test-output/e2e/ and docs/screenshots/."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.runs import RunStore
from tests.conftest import ROOT, require

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-quic", "--no-first-run", "--disable-component-update", "--disable-sync"]
OUT = ROOT / "test-output" / "e2e"
DOCS = ROOT / "docs" / "screenshots"
CHARTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el =>
    (el._fullData || el.data || []).map(t => ({name: t.name, y: Array.from(t.y || [])})))"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STREAMLIT = ["-m", "streamlit", "run", "console/app.py", "--server.address", "127.0.0.1",
             "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.port"]


@dataclass
class Console:
    url: str                    # http://127.0.0.1:PORT
    runs: Path                  # its runs folder (the login token lives there)
    log: Path                   # its stdout and stderr
    proc: subprocess.Popen


@contextlib.contextmanager
def console(argv: list[str], tmp_path: Path):
    """Start ``python <argv> <free port>`` from the repository root with its own runs folder and
    wait for /_stcore/health. Afterwards stop any run left live, then the console's process group."""
    port = _free_port()
    runs = tmp_path / "runs"
    env = dict(os.environ, TFCONSOLE_RUNS=str(runs))
    log_path = tmp_path / "console.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, *argv, str(port)], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read().strip() == b"ok":
                break
        except OSError:
            pass
        if time.time() > deadline or proc.poll() is not None:
            _kill_group(proc)
            pytest.fail("the console did not start: " + log_path.read_text()[-2000:])
        time.sleep(0.3)
    try:
        yield Console(url, runs, log_path, proc)
    finally:
        from backend.launcher import attach
        for state in RunStore(runs).list():   # a failed test must not leave workers behind
            if state.live:
                try:
                    attach(state.run_id, store=RunStore(runs)).stop(grace_s=3)
                except Exception:  # noqa: BLE001 - best effort cleanup
                    pass
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc)
        log.close()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def server(tmp_path):
    """The console as `streamlit run` starts it; yields (URL with the login token, runs folder)."""
    from console import auth
    token = auth.new_token(auth.token_path(tmp_path / "runs"))
    with console(STREAMLIT, tmp_path) as served:
        yield auth.url(token, address="127.0.0.1", port=int(served.url.rsplit(":", 1)[1])), served.runs


def _browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require("playwright (python package)", sync_playwright is not None)
    require("chromium (Debian package)", os.path.exists(CHROMIUM))
    return sync_playwright


def _shot(page, name: str) -> None:
    """Screenshot into test-output/e2e; with UPDATE_SCREENSHOTS=1 also into the README's folder
    (off by default, so a plain `make test` leaves tracked files alone)."""
    OUT.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(800)   # let charts finish drawing
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OUT / f"{name}.png", DOCS / f"{name}.png")


def _click(page, name: str, timeout_s: float = 30) -> None:
    button = page.get_by_role("button", name=name, exact=True)
    try:
        button.click(timeout=timeout_s * 1000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        _fail(page, f"no button {name!r} after {timeout_s} s")


def _fail(page, why: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / "failure.png"), full_page=True)
    pytest.fail(f"{why}; the page shows:\n{page.inner_text('body')[-3000:]}")


def _goto(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
    page.get_by_role("heading", name=title).first.wait_for(timeout=30_000)


def _falling_workers(page) -> list[dict] | None:
    charts = page.evaluate(CHARTS_JS)
    if not charts:
        return None
    workers = [t for t in charts[0] if str(t["name"]).startswith("worker-")]
    if len(workers) == 2 and all(len(t["y"]) >= 5 and t["y"][-1] < t["y"][0] for t in workers):
        return workers
    return None


def _wait_text(page, pattern: str, timeout_s: float) -> str:
    loc = page.get_by_text(re.compile(pattern)).first
    try:
        loc.wait_for(timeout=timeout_s * 1000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        _fail(page, f"no text /{pattern}/ after {timeout_s} s")
    return loc.inner_text()


def _start(page) -> None:
    """Press Start; retry while another program briefly holds a default port (benchmarks)."""
    for _ in range(6):
        _click(page, "Start")
        outcome = page.get_by_text(re.compile(r"Run \S+ started|Preflight failed")).first
        outcome.wait_for(timeout=300_000)   # preflight imports TensorFlow per host: slow when busy
        text = outcome.inner_text()
        if re.match(r"Run \S+ started", text):   # "Preflight failed, nothing was started" is not it
            return
        if "is in use" not in page.inner_text("body"):
            _fail(page, "preflight failed")
        page.wait_for_timeout(10_000)
    _fail(page, "the default ports stayed in use")


def _leftovers(run_id: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if run_id in line and ("train.py" in line or "hostctl.py" in line)]


def test_start_watch_save_export_stop(server):
    sync_playwright = _browser()
    require("ps (procps)", bool(shutil.which("ps")))
    url, runs = server
    began = time.time()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
        # Long enough to save and export while it runs (stopped below), and checkpoints only at
        # epoch ends, so the one Save now makes is not rotated away before the table shows it.
        for label, value in (("epochs", "3"), ("steps_per_epoch", "1500"), ("checkpoint_every", "0")):
            box = page.get_by_label(label, exact=True)
            box.fill(value)
            box.press("Enter")
            page.wait_for_timeout(400)
        _start(page)
        run_id = RunStore(runs).list()[0].run_id
        _shot(page, "launch")

        _goto(page, "Monitor")
        deadline = time.time() + 90
        workers = None
        while workers is None and time.time() < deadline:
            page.wait_for_timeout(1000)
            workers = _falling_workers(page)
        assert workers, f"no two falling worker curves: {page.evaluate(CHARTS_JS)}"
        _wait_text(page, r"step \d+ / \d+", 30)
        _shot(page, "monitor")

        _goto(page, "Checkpoints")
        _click(page, "Save now")
        saved = int(re.search(r"step (\d+)", _wait_text(page, r"Checkpoint saved at step \d+", 90)).group(1))
        _wait_text(page, rf"at steps .*\b{saved}\b", 30)
        # Export while the job trains: a separate process on the chief's host.
        _click(page, "Export")
        _wait_text(page, r"Export \S+ \(step \d+\) verified", 400)   # nice +10: it yields to the training
        page.get_by_role("button", name="Download model.keras").wait_for(timeout=30_000)
        _shot(page, "checkpoints")

        _goto(page, "Launch")
        _click(page, "Stop run")
        _click(page, "Yes, stop it")
        _wait_text(page, r"no process is left on any host", 60)
        assert _leftovers(run_id) == []

        _goto(page, "Cluster")
        page.get_by_text("TF_CONFIG", exact=True).first.wait_for(timeout=30_000)
        _shot(page, "cluster")
        _goto(page, "Runs")
        _wait_text(page, rf"Current run: {run_id}", 30)
        _shot(page, "runs")
        browser.close()
    assert time.time() - began < 240, f"e2e took {time.time() - began:.0f} s"
