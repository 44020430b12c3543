"""Impatient clicks: Start, then another page half a second later. The run must still start,
show on Monitor, and end `finished` in the record every reader sees (docs/facts.md #13)."""
from __future__ import annotations

import re
import time

import pytest

from backend.runs import Phase, RunStore
from tests.conftest import wait_for
from tests.e2e.test_browser import ARGS, CHROMIUM, _browser, _click, _fail, _goto, _wait_text, server  # noqa: F401


@pytest.mark.slow   # trains with real TensorFlow workers
def test_start_then_monitor_at_once_shows_the_run_and_it_ends_finished(server):
    sync_playwright = _browser()
    url, runs = server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.get_by_role("heading", name="Launch").first.wait_for(timeout=60_000)
        for label, value in (("epochs", "1"), ("steps_per_epoch", "60"), ("log_every", "5")):
            box = page.get_by_label(label, exact=True)
            box.fill(value)
            box.press("Enter")
            page.wait_for_timeout(400)
        _click(page, "Start")
        page.wait_for_timeout(500)
        _goto(page, "Monitor")                                   # while Start is still working
        header = _wait_text(page, r"^Run \S+ — |^Start of run \S+ failed", 240)   # not "No run yet"
        if header.startswith("Start of run"):
            _goto(page, "Launch")                                # it shows the preflight table
            _fail(page, header)
        run_id = re.match(r"Run (\S+) — ", header).group(1)
        store = RunStore(runs)
        state = wait_for(lambda: (s := store.load(run_id)) and not s.live and s, 240, "the run to end")
        assert state.phase == Phase.FINISHED and len(state.attempts) == 1, state
        page.goto(url)          # a new session (a bare reload would need the login token again)
        _wait_text(page, rf"Run {re.escape(run_id)} — finished", 60)
        assert [s.run_id for s in store.list()] == [run_id]      # one run, recorded once
        browser.close()
