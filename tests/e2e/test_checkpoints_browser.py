"""Checkpoints page in a real browser while the run trains and checkpoints about every second
(five kept): Export "latest" and Restore of the oldest listed step each succeed three times in a
row, each runs in the background and says the step it used, and the step Restore confirms is the
one picked."""
from __future__ import annotations

import re
import time

import pytest

from tests.e2e import browser as web


def _listed_steps(page) -> list[int]:
    text = web.wait_text(page, r"complete checkpoint\(s\) on the chief, at steps", 60)
    return [int(s) for s in re.findall(r"\d+", text.split("at steps", 1)[1].split(".", 1)[0])]


def _oldest_listed(listed: list[int]):
    def pick(texts: list[str]) -> str:
        both = [t for t in texts if t.isdigit() and int(t) in listed]
        return min(both, key=int) if both else texts[0]
    return pick


@pytest.mark.slow   # trains with real TensorFlow workers
def test_export_latest_and_restore_oldest_three_times_each(server):  # noqa: F811
    sync_playwright = web.playwright()
    url, _ = server
    with sync_playwright() as p:
        browser, page = web.open_console(p, url, height=1400)
        # A checkpoint every 50 steps (about one a second here), five kept: the list rotates. 20 ms
        # asleep per step leaves the cores to the exports and restores the test makes.
        web.set_params(page, {"epochs": 1, "steps_per_epoch": 1000000, "checkpoint_every": 50, "pace_s": 0.02})
        web.start(page)
        run_id = re.search(r"Run (\S+) started", web.wait_text(page, r"Run \S+ started", 30)).group(1)

        web.goto(page, "Checkpoints")
        deadline = time.time() + 180
        while len(_listed_steps(page)) < 3 and time.time() < deadline:
            page.wait_for_timeout(1000)
        for i in range(3):
            newest_before = max(_listed_steps(page))
            page.get_by_label("Name (optional)").fill(f"latest-{i}")
            page.get_by_label("Name (optional)").press("Enter")
            web.click(page, "Export")
            web.wait_text(page, rf"export {run_id}: working", 30)     # the page came back at once
            text = web.wait_text(page, rf"Export latest-{i} \(step \d+\) verified", 300)
            step = int(re.search(r"\(step (\d+)\)", text).group(1))
            assert step >= newest_before, (step, newest_before)   # "latest" meant the newest then
        web.shot(page, "checkpoints-exported")

        attempt = 1
        for i in range(3):
            # Picking reruns the page, so the second pick chooses from the newest list.
            first = web.choose(page, "Resume from step", _oldest_listed(_listed_steps(page)))
            web.wait_text(page, rf"Restore will use step {first}\.", 30)
            oldest = web.choose(page, "Resume from step", _oldest_listed(_listed_steps(page)))
            web.wait_text(page, rf"Restore will use step {oldest}\.", 30)
            web.click(page, "Restore")
            asked = web.wait_text(page, r"Relaunch run \S+ from step \d+\?", 30)
            assert f"from step {oldest}?" in asked, (oldest, asked)
            web.click(page, "Yes, restore")
            web.wait_text(page, rf"restore {run_id}: working", 30)    # the page came back at once
            done = web.wait_text(page, rf"Run {run_id} restored from step {oldest}: attempt \d+ resumed", 300)
            now = int(re.search(r"attempt (\d+) resumed", done).group(1))
            assert now > attempt, (now, attempt, done)                # this restore's result, not the last one's
            attempt = now
            resumed = re.findall(r"(\S+) from step (\d+)", done.split("resumed:", 1)[1].split("Moved aside", 1)[0])
            assert len(resumed) == 2 and {s for _, s in resumed} == {oldest}, done
            web.shot(page, f"checkpoints-restored-{i}")
        browser.close()
