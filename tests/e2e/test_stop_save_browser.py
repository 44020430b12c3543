"""Save, then stop from the real browser (issue 29 item 4): the console says which step every
worker saved, the Checkpoints page's Restore offers that step first, and after Restore the run
trains on from exactly that step."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from backend.runs.launcher import attach
from backend.runs.store import RunStore
from tests.conftest import processes_of, wait_for
from rig import browser as chromium
from tests.e2e import browser as web
from tests.e2e.test_checkpoints_browser import _listed_steps


def _first_rows(run, attempt: int) -> list[int]:
    """Steps of ``attempt`` in the chief's metrics (the Monitor's source)."""
    folder = run.state.chief.remote_run_dir
    path = Path(folder if os.path.isabs(folder) else os.path.expanduser(f"~/{folder}")) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(r["step"] for r in rows if r["attempt"] == attempt)


@pytest.mark.slow   # trains with real TensorFlow workers
def test_save_then_stop_then_restore_offers_and_resumes_the_saved_step(server):
    sync_playwright = web.playwright()
    url, runs = server
    with sync_playwright() as p:
        browser, page = web.open_console(p, url, height=1400)
        # Periodic checkpoints every 100 steps: the step Save-then-stop saves is not one of them.
        web.set_params(page, {"epochs": 1, "steps_per_epoch": 1000000, "checkpoint_every": 100,
                              "pace_s": 0.02})
        web.start(page)
        run_id = re.search(r"Run (\S+) started", web.wait_text(page, r"Run \S+ started", 30)).group(1)
        web.goto(page, "Checkpoints")
        web.wait_text(page, r"complete checkpoint\(s\) on the chief, at steps", 240)

        web.goto(page, "Monitor")
        web.click(page, "Stop run", 120)
        web.click(page, "Save, then stop", 120)
        said = web.wait_text(page, rf"Stopped {run_id}: saved step \d+ on every worker: Restore "
                                   r"offers it first; no process is left on any host", 180)
        saved = int(re.search(r"saved step (\d+)", said).group(1))
        run = attach(run_id, store=RunStore(runs))
        assert run.state.phase == "stopped"
        # The step it was at, not an older periodic checkpoint: the last step the run ran (a
        # periodic step only when the stop came exactly there).
        assert max(_first_rows(run, 1)) == saved, saved
        # The tasks are gone when the page says so; the console's own watch agent ends with the
        # page's next look at the stopped run (as in test_browser.py).
        wait_for(lambda: processes_of(run) == [], 60, "no process of the run, the console's watch agent included")

        web.goto(page, "Checkpoints")
        listed = _listed_steps(page)
        assert max(listed) == saved and len(listed) >= 2, listed
        offered: list[str] = []
        picked = web.choose(page, "Resume from step", lambda texts: (offered.extend(texts), texts[0])[1])
        assert offered[0] == str(saved) and picked == str(saved), offered   # offered first
        web.wait_text(page, rf"Restore will use step {saved}\.", 30)
        web.click(page, "Restore")
        asked = web.wait_text(page, r"Relaunch run \S+ from step \d+\?", 30)
        assert f"from step {saved}?" in asked, asked
        web.click(page, "Yes, restore")
        done = web.wait_text(page, rf"Run {run_id} restored from step {saved}: attempt 2 resumed", 300)
        resumed = re.findall(r"(\S+) from step (\d+)", done.split("resumed:", 1)[1])
        assert len(resumed) == 2 and {s for _, s in resumed} == {str(saved)}, done
        web.shot(page, "stop-save-restored")

        # Training goes on from that step: the Monitor's progress passes it, and attempt 2's first
        # metrics row is the step after it (nothing trained twice, nothing skipped).
        web.goto(page, "Monitor")
        web.wait_text(page, r"step \d+ / 1000000", 120)
        run = attach(run_id, store=RunStore(runs))
        wait_for(lambda: _first_rows(run, 2), 120, "attempt 2's first metrics row")
        assert _first_rows(run, 2)[0] == saved + 1, _first_rows(run, 2)[:3]
        # A click on a Monitor that redraws every 2 s can be lost in a redraw (a full run saw
        # "Stop run" open no confirmation for 120 s): click again, as an operator would.
        for _ in range(6):
            web.click(page, "Stop run", 120)
            try:
                chromium.button(page, "Yes, stop it").first.wait_for(timeout=20_000)
                break
            except Exception:  # noqa: BLE001 - playwright's timeout: the click was lost
                continue
        web.click(page, "Yes, stop it", 120)
        web.wait_text(page, rf"Stopped {run_id}: no process is left on any host", 120)
        browser.close()
