"""Helpers of the browser tests (and bench/first_curves.py): start the console as operators do,
drive headless Chromium with Playwright, and say what the page showed when a wait fails."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.runs.store import RunStore
from tests.conftest import ROOT, require
from rig.browser import ARGS, CHROMIUM, FEED_JS, button
from rig.sshd import free_port

LOGS: list[Path] = []   # the logs of the consoles running now, newest last
PAGE_EVENTS: list[str] = []   # what the browser said went wrong (a crash, a script error)
OUT = ROOT / "test-output" / "e2e"
DOCS = ROOT / "docs" / "screenshots"
CHARTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(el =>
    (el._fullData || el.data || []).map(t => ({name: t.name, y: Array.from(t.y || [])})))"""


STREAMLIT = ["-m", "streamlit", "run", "console/app.py", "--server.address", "127.0.0.1",
             "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.port"]


@dataclass
class Console:
    url: str                    # http://127.0.0.1:PORT
    runs: Path                  # its runs folder (the login token lives there)
    log: Path                   # its stdout and stderr
    proc: subprocess.Popen


@contextlib.contextmanager
def console(argv: list[str], tmp_path: Path, *, runs: Path | None = None):
    """Start ``python <argv> <free port>`` from the repository root with its own runs folder
    (``tmp_path/runs`` unless given) and wait for /_stcore/health. Afterwards stop any run left
    live, then the console's process group."""
    port = free_port()
    runs = runs or tmp_path / "runs"
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
            kill_group(proc)
            pytest.fail("the console did not start: " + log_path.read_text()[-2000:])
        time.sleep(0.3)
    LOGS.append(log_path)   # a failing wait shows its tail (``fail``)
    try:
        yield Console(url, runs, log_path, proc)
    finally:
        LOGS.remove(log_path)
        from backend.runs.launcher import attach
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
        kill_group(proc)
        log.close()


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require("playwright (python package)", sync_playwright is not None)
    require("chromium (Debian package)", os.path.exists(CHROMIUM))
    return sync_playwright


def open_console(pw, url: str, *, height: int = 1000):
    """A new headless Chromium on the console's Launch page; returns (browser, page)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    page = browser.new_page(viewport={"width": 1400, "height": height})
    PAGE_EVENTS.clear()
    page.on("crash", lambda _: PAGE_EVENTS.append("the page crashed"))
    page.on("pageerror", lambda err: PAGE_EVENTS.append(f"script error: {err}"))
    page.on("websocket", lambda ws: ws.on("close", lambda _: PAGE_EVENTS.append(
        f"{time.strftime('%H:%M:%S')} websocket closed: {ws.url}")))
    page.goto(url)
    page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
    return browser, page


def set_params(page, values: dict) -> None:
    """Type job parameters into the Launch form (each box commits on Enter)."""
    for label, value in values.items():
        box = page.get_by_label(label, exact=True)
        box.fill(str(value))
        box.press("Enter")
        page.wait_for_timeout(400)


def shot(page, name: str) -> None:
    """Screenshot into test-output/e2e; with UPDATE_SCREENSHOTS=1 also into the README's folder
    (off by default, so a plain `make test` leaves tracked files alone)."""
    OUT.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(800)   # let charts finish drawing
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True, timeout=90_000)   # a busy page draws late
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OUT / f"{name}.png", DOCS / f"{name}.png")


def click(page, name: str, timeout_s: float = 30) -> None:
    try:
        button(page, name).click(timeout=timeout_s * 1000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        fail(page, f"no button {name!r} after {timeout_s} s")


def fail(page, why: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / "failure.png"), full_page=True)
    text = page.inner_text("body")
    shown = text if len(text) < 6000 else text[:3000] + "\n[...]\n" + text[-3000:]
    # A blank page says nothing by itself (seen once in a loaded full run): what the browser and
    # the console's own log said are the clues.
    said = "\n".join(PAGE_EVENTS[-20:]) or "nothing"
    logs = "".join(f"\n--- {log.name}, last lines:\n" + "\n".join(
        log.read_text(errors="replace").splitlines()[-40:]) for log in LOGS if log.exists())
    pytest.fail(f"{why}; the page shows:\n{shown}\n--- the browser said: {said}{logs}")


def goto(page, title: str) -> None:
    # Generous: a page busy drawing live charts on a loaded 2-core machine answers clicks late.
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click(timeout=180_000)
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)


def loss_feed_grows(page, timeout_s: float = 120) -> tuple[dict, dict]:
    """The loss chart's counts now, and once it holds more points (Monitor must be open)."""
    before = page.evaluate(FEED_JS)[0]
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        page.wait_for_timeout(500)
        after = page.evaluate(FEED_JS)[0]
        if after["held"] > before["held"]:
            return before, after
    fail(page, f"the loss chart got no new points in {timeout_s:.0f} s: {before}")


def falling_workers(page) -> list[dict] | None:
    """The loss chart's two per-task curves (chief and worker, or two workers), when both fall."""
    charts = page.evaluate(CHARTS_JS)
    if not charts:
        return None
    tasks = [t for t in charts[0] if not str(t["name"]).startswith("global")]
    if len(tasks) == 2 and all(len(t["y"]) >= 5 and t["y"][-1] < t["y"][0] for t in tasks):
        return tasks
    return None


def choose(page, label: str, pick) -> str:
    """Choose ``pick(option texts)`` in the selectbox ``label``; return the chosen text.

    A page run that ends while the list is open (a background action finishing, the pick before
    this one) closes it and redraws the options, as it would under an operator's mouse: then the
    list is opened again and the pick made from the new options. A click that lands while such a
    page run redraws the box opens nothing (seen once in a loaded CI run, the box redrawn with
    a new list); the operator clicks again, and so does this."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label)
    options = page.locator('[role="option"]')
    for _ in range(4):
        box.click()
        try:
            options.first.wait_for(timeout=10_000)
        except Exception:  # noqa: BLE001 - the click opened nothing; click again
            page.keyboard.press("Escape")
            continue
        target = pick([t.strip() for t in options.all_inner_texts()])
        try:
            options.filter(has_text=re.compile(rf"^\s*{re.escape(target)}\s*$")).first.click(timeout=5_000)
            return target
        except Exception:  # noqa: BLE001 - the list was redrawn under us; open it again
            page.keyboard.press("Escape")
    fail(page, f"selectbox {label!r}: four clicks, and no pick held (no options shown, or "
                   "the list redrawn each time)")


def wait_text(page, pattern: str, timeout_s: float) -> str:
    loc = page.get_by_text(re.compile(pattern)).first
    try:
        loc.wait_for(timeout=timeout_s * 1000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        fail(page, f"no text /{pattern}/ after {timeout_s} s")
    return loc.inner_text()


def start(page) -> None:
    """Press Start; retry while another program briefly holds a default port (benchmarks)."""
    for _ in range(6):
        click(page, "Start")
        outcome = page.get_by_text(re.compile(r"Run \S+ started|Preflight failed")).first
        outcome.wait_for(timeout=300_000)   # preflight imports TensorFlow per host: slow when busy
        text = outcome.inner_text()
        if re.match(r"Run \S+ started", text):   # "Preflight failed, nothing was started" is not it
            return
        if "is in use" not in page.inner_text("body"):
            fail(page, "preflight failed")
        page.wait_for_timeout(10_000)
    fail(page, "the default ports stayed in use")


COMMAND_LABEL = "Command run on every host (TF_CONFIG is set)"


def start_command(page, command: str) -> str:
    """On Launch, pick the Command job kind, type ``command``, press Start; the run id."""
    page.locator('[data-testid="stRadio"]').get_by_text("Command", exact=True).click()
    box = page.get_by_label(COMMAND_LABEL, exact=True)
    box.wait_for(timeout=30_000)
    box.fill(command)
    box.press("Enter")
    page.wait_for_timeout(400)
    start(page)
    return re.search(r"Run (\S+) started", wait_text(page, r"Run \S+ started", 30)).group(1)
