"""The monitor's journal: the state file may lag the mirror, never the other way round."""
from __future__ import annotations

import json
import os

from backend.watch.journal import METRICS, OFFSETS_FILE, Journal


def row(step: int) -> bytes:
    return json.dumps({"task": "chief-0", "step": step, "loss": 1.0}).encode() + b"\n"


def offsets(step: int) -> dict:
    return {METRICS: {"offset": 100 * step, "inode": 7}}


def test_a_console_that_dies_between_state_writes_counts_no_line_twice(tmp_path):
    journal = Journal(str(tmp_path), state_every_s=3600)
    journal.commit([row(1)], {"chief-0": ["line 1"]}, {}, offsets(1))   # the first is written
    journal.commit([row(2)], {"chief-0": ["line 2"]}, {}, offsets(2))   # this one waits
    on_disk = json.loads((tmp_path / OFFSETS_FILE).read_text())
    assert on_disk["offsets"] == offsets(1)
    # The console dies here (no close): the mirror holds step 2, the state says step 1. The next
    # console cuts the mirror back to the state and the agent sends step 2 again from offsets(1).
    again = Journal(str(tmp_path))
    assert again.offsets == offsets(1)
    assert b"".join(again.metric_blocks()) == row(1)
    assert again.recent_logs(10) == {"chief-0": ["line 1"]}


def test_close_writes_the_last_commit(tmp_path):
    journal = Journal(str(tmp_path), state_every_s=3600)
    for step in (1, 2, 3):
        journal.commit([row(step)], {}, {"other": 1}, offsets(step))
    journal.close()
    again = Journal(str(tmp_path))
    assert again.offsets == offsets(3) and again.skipped == {"other": 3}
    assert b"".join(again.metric_blocks()) == row(1) + row(2) + row(3)


def test_commits_further_apart_than_the_interval_are_each_written(tmp_path):
    journal = Journal(str(tmp_path), state_every_s=0)
    for step in (1, 2):
        journal.commit([row(step)], {}, {}, offsets(step))
        assert json.loads((tmp_path / OFFSETS_FILE).read_text())["offsets"] == offsets(step)
    assert not os.path.exists(tmp_path / f"{OFFSETS_FILE}.tmp")
