"""One checkpoint-row builder (backend.checkpoints.checkpoint_rows) serves the command line and the
Checkpoints page; each keeps the columns it showed before (issue 28 item 3, same behaviour)."""
from __future__ import annotations

import time

from backend import checkpoints
from console import actions

T = 1_700_000_000.0
FOUND = [{"step": 20, "epoch": 1, "global_loss": 0.5, "time": T, "files": {"a": 1024, "b": 1024},
          "held": ["export", "restore"]},
         {"step": 10, "epoch": 0, "global_loss": 0.9, "files": {}, "abandoned": "attempt-2-restore-5"}]


def test_the_command_line_rows():
    assert checkpoints.checkpoint_rows(FOUND) == [
        {"step": 10, "epoch": 0, "loss": 0.9, "time": "", "bytes": None},
        {"step": 20, "epoch": 1, "loss": 0.5, "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(T)),
         "bytes": 2048}]


def test_the_page_rows():
    assert actions.checkpoint_rows(FOUND) == [
        {"step": 10, "epoch": 0, "loss": 0.9, "time": "", "size (KB)": None, "held by": "",
         "moved by": "attempt-2-restore-5"},
        {"step": 20, "epoch": 1, "loss": 0.5, "time": time.strftime("%H:%M:%S", time.localtime(T)),
         "size (KB)": 2.0, "held by": "export, restore"}]
