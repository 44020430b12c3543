"""The login token in a real browser: nothing opens without it, the printed URL opens the console,
and the session keeps working from page to page (console/ui/auth.py)."""
from __future__ import annotations

import os
import re
import stat

import pytest

from console import tokens
from tests.conftest import wait_for
from rig import browser as chromium
from tests.e2e import browser as web

MAKE_RUN = ["-m", "console", "--address", "127.0.0.1", "--port"]   # what `make run` runs
PAGES = ["Monitor", "Checkpoints", "Cluster", "Runs", "Audit", "Launch"]


def _printed_url(log) -> str:
    found = wait_for(lambda: re.search(r"tfconsole: open (\S+)", log.read_text()), 60,
                     "the console to print its URL")
    return found.group(1)


def _assert_refused(page, *, wrong: bool = False) -> None:
    try:
        page.get_by_role("heading", name="Login token needed").wait_for(timeout=60_000)
    except Exception:  # noqa: BLE001 - say what the page showed instead
        web.fail(page, "no refusal after 60 s")
    body = page.inner_text("body")
    assert ("not this console's" in body) is wrong, body
    assert page.locator('[data-testid="stSidebarNav"]').count() == 0, body   # not even the page names
    assert page.locator("input, textarea, select").count() == 0, body
    for word in ("Launch", "Start", "TF_CONFIG", "Save now"):
        assert word not in body, body


def _heading(page, title: str) -> None:
    page.get_by_role("heading", name=title).first.wait_for(timeout=60_000)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_make_run_prints_the_url_that_opens_the_console_and_nothing_opens_without_it(tmp_path):
    sync_playwright = web.playwright()
    with web.console(MAKE_RUN, tmp_path) as served, sync_playwright() as p:
        printed = _printed_url(served.log)
        token = tokens.token_path(served.runs).read_text().strip()
        assert printed == f"{served.url}/?token={token}"
        assert stat.S_IMODE(os.stat(tokens.token_path(served.runs)).st_mode) == 0o600
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})

        for address in (served.url, served.url + "/monitor", served.url + "/cluster"):
            page.goto(address)
            _assert_refused(page)
        page.goto(served.url + "/?token=" + token[:-1] + ("A" if token[-1] != "A" else "B"))
        _assert_refused(page, wrong=True)

        page.goto(printed)
        _heading(page, "Launch")
        wait_for(lambda: "token" not in page.url, 30, "the token to leave the address bar")
        for title in PAGES:                # the session keeps the token from page to page
            page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
            _heading(page, title)
            assert "Login token needed" not in page.inner_text("body")
        page.get_by_role("button", name="Start", exact=True).wait_for(timeout=30_000)

        page.reload()                      # a new session: the address bar no longer holds it
        _assert_refused(page)
        browser.close()
        # Printed once: by `make run`, not again by the console at its first page load.
        assert served.log.read_text().count("tfconsole: open ") == 1, served.log.read_text()

        served.proc.terminate()            # stopping `make run` stops the console it started
        served.proc.wait(30)
        wait_for(lambda: not _group_alive(served.proc.pid), 30, "the console to stop with make run")
    assert token not in re.sub(r"tfconsole: open \S+", "", served.log.read_text())


def test_streamlit_run_prints_the_url_when_the_first_page_loads(tmp_path):
    sync_playwright = web.playwright()
    with web.console(web.STREAMLIT, tmp_path) as served, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(served.url)
        _assert_refused(page)
        printed = _printed_url(served.log)   # made and printed by the first page load
        page.goto(printed)
        _heading(page, "Launch")
        page.locator('[data-testid="stSidebarNav"]').get_by_text("Cluster", exact=True).click()
        _heading(page, "Cluster")
        browser.close()


def test_with_the_token_off_every_page_says_so(tmp_path, monkeypatch):
    sync_playwright = web.playwright()
    monkeypatch.setenv(tokens.ENV, "none")
    with web.console(MAKE_RUN, tmp_path) as served, sync_playwright() as p:
        assert _printed_url(served.log) == served.url + "/"
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(served.url)
        for title in PAGES:
            page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
            _heading(page, title)
            page.get_by_text("The login token is off").first.wait_for(timeout=30_000)
        browser.close()
        assert not tokens.token_path(served.runs).exists()


def _live_run(runs):
    """A real two-worker run, long enough to stay live for the whole test (stopped by web.console());
    20 ms asleep per step leave the cores to the console and the browser under test."""
    from backend.runs.launcher import Preflight, launch
    from backend.runs.store import RunStore
    from backend.config.spec import job_from_dict
    from console.forms import check_rows
    from tests.app.conftest import local_rows
    from tests.conftest import ROOT
    cluster, _ = check_rows(local_rows())
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 1, "steps_per_epoch": 100_000, "checkpoint_every": 50,
                                    "log_every": 5, "pace_s": 0.02}})
    return launch(cluster, job, store=RunStore(runs), preflight=Preflight.SKIP)


@pytest.mark.slow   # trains with real TensorFlow workers
def test_a_session_whose_token_is_revoked_stops_at_once(tmp_path):
    """Monitor and Checkpoints redraw themselves (fragments, every 2 s) without a page load: when
    the owner deletes the token file, both stop drawing and show only the refusal, by themselves,
    and neither page breaks as their old fragments' timers go on ticking (docs/facts.md #15)."""
    sync_playwright = web.playwright()
    with web.console(MAKE_RUN, tmp_path) as served, sync_playwright() as p:
        token = _printed_url(served.log).rsplit("=", 1)[1]
        run = _live_run(served.runs)
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        monitor, listing = (browser.new_page(viewport={"width": 1400, "height": 1000}) for _ in "ab")
        broken = []                              # the browser's own errors: a blank page is one
        for page in (monitor, listing):
            page.on("pageerror", lambda err: broken.append(str(err)))
        monitor.goto(f"{served.url}/monitor?token={token}")
        _heading(monitor, "Monitor")
        line = f"harness start run={run.run_id}"   # the workers' first log line
        monitor.get_by_text(line).first.wait_for(timeout=240_000)
        listing.goto(f"{served.url}/checkpoints?token={token}")
        _heading(listing, "Checkpoints")
        listing.get_by_text(re.compile(r"complete checkpoint")).first.wait_for(timeout=240_000)
        monitor.locator(".js-plotly-plot").first.wait_for(timeout=120_000)   # the chart follows the log line

        tokens.token_path(served.runs).unlink()   # the owner revokes every URL handed out so far
        for page in (monitor, listing):         # no click, no reload: the fragments' next run
            _assert_refused(page)
            assert page.locator(".js-plotly-plot").count() == 0
            assert run.run_id not in page.inner_text("body")   # no header, no log line
        # The new token was made once, under the lock, and the URL printed is the file's.
        new = wait_for(lambda: tokens.token_path(served.runs).exists()
                       and tokens.token_path(served.runs).read_text().strip(), 30, "a new token")
        assert re.findall(r"tfconsole: open \S+", served.log.read_text())[-1].endswith("=" + new)
        monitor.goto(f"{served.url}/monitor?token={new}")
        _heading(monitor, "Monitor")
        _assert_refused(listing)                # still shut, seconds (several old ticks) later
        assert broken == []
        browser.close()
