"""The whole console in a real browser, over real sshd hosts named by ~/.ssh/config aliases: import
the cluster, start, watch the loss fall, save, export, restart the console and reattach to the live
run, stop, and check with ps that no process of the run is left. Screenshots of every page go to
test-output/e2e/ (and docs/screenshots/ with UPDATE_SCREENSHOTS=1). The helpers here serve the
other browser tests too."""
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
from tests.conftest import ROOT, processes_of, require, wait_for

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
    log_path = tmp_path / f"console-{port}.log"   # one per console: a restart keeps the old log
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
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True, timeout=90_000)   # a busy page draws late
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OUT / f"{name}.png", DOCS / f"{name}.png")


def _button(page, name: str):
    """The page's button ``name``; not a stale one the previous page or run left on screen."""
    fresh = page.locator('[data-testid="stElementContainer"]:not([data-stale="true"])')
    return fresh.get_by_role("button", name=name, exact=True)


def _click(page, name: str, timeout_s: float = 30) -> None:
    try:
        _button(page, name).click(timeout=timeout_s * 1000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        _fail(page, f"no button {name!r} after {timeout_s} s")


def _fail(page, why: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / "failure.png"), full_page=True)
    text = page.inner_text("body")
    shown = text if len(text) < 6000 else text[:3000] + "\n[...]\n" + text[-3000:]
    pytest.fail(f"{why}; the page shows:\n{shown}")


def _goto(page, title: str) -> None:
    # Generous: a page busy drawing live charts on a loaded 2-core machine answers clicks late.
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click(timeout=180_000)
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)


def _falling_workers(page) -> list[dict] | None:
    """The loss chart's two per-task curves (chief and worker, or two workers), when both fall."""
    charts = page.evaluate(CHARTS_JS)
    if not charts:
        return None
    tasks = [t for t in charts[0] if not str(t["name"]).startswith("global")]
    if len(tasks) == 2 and all(len(t["y"]) >= 5 and t["y"][-1] < t["y"][0] for t in tasks):
        return tasks
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



class SSHConsole:
    """A console for an operator whose ~/.ssh/config names the two sshd hosts h2 and h3, and a
    cluster YAML that names them by alias alone. ``restart()`` kills the console's whole process
    group (as a crash would; the run on the hosts goes on) and starts a new console over the same
    runs folder and HOME, as the operator would."""

    def __init__(self, tmp_path: Path, cluster, stack: contextlib.ExitStack) -> None:
        from backend.spec import save_cluster
        self.tmp_path, self.stack = tmp_path, stack
        self.cluster = tmp_path / "cluster.yaml"
        save_cluster(cluster, self.cluster)
        self.served: Console | None = None
        self.url = self.restart()

    @property
    def runs(self) -> Path:
        return self.served.runs

    def restart(self) -> str:
        """Start the console (killing the running one first); the URL with a new login token."""
        from console import auth
        if self.served is not None:
            _kill_group(self.served.proc)
        token = auth.new_token(auth.token_path(self.tmp_path / "runs"))
        self.served = self.stack.enter_context(console(STREAMLIT, self.tmp_path))
        return auth.url(token, address="127.0.0.1", port=int(self.served.url.rsplit(":", 1)[1]))


@pytest.fixture
def ssh_console(tmp_path, alias_cluster):
    with contextlib.ExitStack() as stack:   # closing it stops live runs, then every console started
        yield SSHConsole(tmp_path, alias_cluster, stack)


ALIAS_TASKS = r"chief-0 on h2:\d+, worker-0 on h3:\d+"                 # the Cluster page's summary
LAUNCH_CLUSTER = r"Cluster: chief-0 on h2:\d+ \(ssh\), worker-0 on h3:\d+ \(ssh\)"   # Launch's caption


def _import_yaml(page, path: Path) -> None:
    _goto(page, "Cluster")
    page.get_by_text("Import tasks").first.click()
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))
    _click(page, "Load this YAML")
    _wait_text(page, r"Imported\.", 60)
    _wait_text(page, rf"2 task\(s\): {ALIAS_TASKS}", 60)


def _curves_reach(page, step: int, timeout_s: float) -> list[dict]:
    """Poll the Monitor page until both tasks' loss curves fall and the progress is past ``step``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        page.wait_for_timeout(1000)
        tasks = _falling_workers(page)
        shown = page.get_by_text(re.compile(r"^step \d+ / \d+")).all_inner_texts()
        if tasks and shown and int(re.match(r"step (\d+)", shown[0]).group(1)) > step:
            return tasks
    curves = [[(t["name"], len(t["y"])) for t in chart] for chart in page.evaluate(CHARTS_JS)]
    _fail(page, f"no two falling loss curves past step {step}; curves (name, points): {curves}")


def _start_on_aliases(page, ssh_console: SSHConsole) -> str:
    """Import the cluster YAML and Start a long run on it; the run id."""
    _import_yaml(page, ssh_console.cluster)
    _goto(page, "Launch")
    _wait_text(page, LAUNCH_CLUSTER, 60)
    # Long enough to save, export and restart the console while it trains (stopped by the test);
    # checkpoints only at epoch ends, so the one Save now makes is not rotated away first.
    for label, value in (("epochs", "3"), ("steps_per_epoch", "20000"), ("checkpoint_every", "0")):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        page.wait_for_timeout(400)
    _start(page)
    _shot(page, "launch")
    return RunStore(ssh_console.runs).list()[0].run_id


def _save_and_export(page) -> int:
    """Save now, then Export while the job trains (a separate process on the chief's host);
    the saved step."""
    _goto(page, "Checkpoints")
    _click(page, "Save now")
    saved = int(re.search(r"step (\d+)", _wait_text(page, r"Checkpoint saved at step \d+", 300)).group(1))
    _wait_text(page, rf"at steps .*\b{saved}\b", 120)
    _click(page, "Export")
    _wait_text(page, r"Export \S+ \(step \d+\) verified", 400)   # nice +10: it yields to the training
    _button(page, "Download model.keras").wait_for(timeout=60_000)
    _shot(page, "checkpoints")
    return saved


@pytest.mark.slow   # trains with real TensorFlow workers
def test_console_over_ssh_aliases_survives_a_restart(ssh_console):
    """The whole console over real sshd hosts named by ~/.ssh/config aliases: import the cluster
    YAML, Start, watch both losses fall, Save now, Export while it trains; then kill the console
    and start a new one while the run trains: a new browser session shows the live run on its
    hosts with Stop on Launch and Monitor, and its curves go on; Stop on Monitor, and no process
    of the run is left on the hosts."""
    from backend.launcher import attach
    sync_playwright = _browser()
    require("ps (procps)", bool(shutil.which("ps")))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(ssh_console.url)
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
        run_id = _start_on_aliases(page, ssh_console)
        _goto(page, "Monitor")
        _curves_reach(page, 0, 180)
        _shot(page, "monitor")
        saved = _save_and_export(page)

        # The console dies and a new one starts while the run trains; a new browser session.
        page.goto(ssh_console.restart())
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=120_000)
        _wait_text(page, rf"^Run {run_id} — running", 120)
        _wait_text(page, LAUNCH_CLUSTER, 60)
        _button(page, "Stop run").wait_for(timeout=120_000)
        _shot(page, "reattached")
        _goto(page, "Monitor")
        _wait_text(page, rf"^Run {run_id} — running", 120)
        _curves_reach(page, saved, 180)   # steps made after the restart reach the new console
        # Stop here: Monitor offers it too (Launch's was seen above), and a live Monitor redraws
        # its charts every 2 s, so on a loaded machine the browser answers a click away late.
        _click(page, "Stop run", 120)
        _click(page, "Yes, stop it", 120)
        _wait_text(page, rf"Stopped {run_id}: no process is left on any host", 120)
        run = attach(run_id, store=RunStore(ssh_console.runs))
        assert run.state.phase == "stopped", run.state.phase
        # The workers are gone at once; the console rests its watch agent within seconds.
        wait_for(lambda: processes_of(run) == [], 60, "no process of the run, the console's watch agent included")

        _goto(page, "Cluster")   # what Start would use next: the hosts the run trained on
        _wait_text(page, rf"2 task\(s\): {ALIAS_TASKS}", 60)
        page.get_by_text("TF_CONFIG", exact=True).first.wait_for(timeout=60_000)
        _shot(page, "cluster")
        _goto(page, "Runs")
        _wait_text(page, rf"Current run: {run_id}", 60)
        _shot(page, "runs")
        browser.close()
