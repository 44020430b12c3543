"""A Keras user's `model.fit` script with one callback (examples/keras_fit.py), started from the
Launch form's Command field on the two local workers, in a real browser: Monitor draws both
workers' falling curves, and on the Checkpoints page Save now, Export (verified in a fresh
process, built from the architecture the callback recorded) and Restore from the saved step work
as they do for harness jobs."""
from __future__ import annotations

import re

import pytest

from rig import browser as chromium
from tests.e2e import browser as web


# 50 ms asleep per step leaves the 2 cores to the export and the browser; 2 x 1500 steps outlast
# the test (the fixture stops the run at the end).
FIT = "examples/keras_fit.py --epochs 2 --steps 1500 --pace 0.05"


@pytest.mark.slow   # trains with real TensorFlow workers
def test_fit_job_curves_save_now_export_and_restore_in_the_browser(server):
    sync_playwright = web.playwright()
    url, _ = server
    with sync_playwright() as p:
        browser, page = web.open_console(p, url, height=1400)
        run_id = web.start_command(page, FIT)

        web.goto(page, "Monitor")
        for _ in range(180):
            tasks = web.falling_workers(page)
            if tasks:
                break
            page.wait_for_timeout(1000)
        else:
            web.fail(page, "no two falling per-worker loss curves in 180 s")
        assert sorted(t["name"] for t in tasks) == ["worker-0", "worker-1"], tasks
        web.shot(page, "fit-monitor")

        web.goto(page, "Checkpoints")
        web.click(page, "Save now")
        saved = int(re.search(r"step (\d+)", web.wait_text(page, r"Checkpoint saved at step \d+", 300)).group(1))
        web.wait_text(page, rf"at steps .*\b{saved}\b", 120)
        web.click(page, "Export")
        text = web.wait_text(page, r"Export \S+ \(step \d+\) verified", 400)
        assert f"(step {saved})" in text, (saved, text)   # the newest listed: the one just saved
        chromium.button(page, "Download model.keras").wait_for(timeout=60_000)

        picked = web.choose(page, "Resume from step", lambda texts: str(saved) if str(saved) in texts else texts[0])
        assert picked == str(saved)
        web.wait_text(page, rf"Restore will use step {saved}\.", 30)
        web.click(page, "Restore")
        web.wait_text(page, rf"Relaunch run \S+ from step {saved}\?", 30)
        web.click(page, "Yes, restore")
        done = web.wait_text(page, rf"Run {run_id} restored from step {saved}: attempt \d+ resumed", 300)
        resumed = re.findall(r"(\S+) from step (\d+)", done.split("resumed:", 1)[1].split("Moved aside", 1)[0])
        assert sorted(resumed) == [("worker-0", str(saved)), ("worker-1", str(saved))], done
        web.shot(page, "fit-restored")
        browser.close()
