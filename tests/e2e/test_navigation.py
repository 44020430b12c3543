"""Impatient clicks: Start, then another page half a second later. The run must still start,
show on Monitor, and end `finished` in the record every reader sees (docs/facts.md #13)."""
from __future__ import annotations

import re

import pytest

from backend.runs.store import RunStore
from backend.records.state import Phase
from tests.conftest import wait_for
from tests.e2e import browser as web


@pytest.mark.slow   # trains with real TensorFlow workers
def test_start_then_monitor_at_once_shows_the_run_and_it_ends_finished(server):
    sync_playwright = web.playwright()
    url, runs = server
    with sync_playwright() as p:
        browser, page = web.open_console(p, url)
        web.set_params(page, {"epochs": 1, "steps_per_epoch": 60, "log_every": 5})
        web.click(page, "Start")
        page.wait_for_timeout(500)
        web.goto(page, "Monitor")                                   # while Start is still working
        header = web.wait_text(page, r"^Run \S+ — |^Start of run \S+ failed", 240)   # not "No run yet"
        if header.startswith("Start of run"):
            web.goto(page, "Launch")                                # it shows the preflight table
            web.fail(page, header)
        run_id = re.match(r"Run (\S+) — ", header).group(1)
        store = RunStore(runs)
        state = wait_for(lambda: (s := store.load(run_id)) and not s.live and s, 240, "the run to end")
        assert state.phase == Phase.FINISHED and len(state.attempts) == 1, state
        # The page left open says so too, its header included (not only its live panel).
        web.wait_text(page, rf"^Run {re.escape(run_id)} — finished", 60)
        web.wait_text(page, r"This run is finished: there is nothing left to stop", 60)
        page.goto(url)          # a new session (a bare reload would need the login token again)
        web.wait_text(page, rf"Run {re.escape(run_id)} — finished", 60)
        assert [s.run_id for s in store.list()] == [run_id]      # one run, recorded once
        browser.close()
