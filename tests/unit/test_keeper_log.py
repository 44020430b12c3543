"""The keeper's log on a disk that takes nothing (/dev/full: every write is ENOSPC), then room."""
from __future__ import annotations

import os

from backend.runs.keeper_log import KeeperLog


def test_lines_the_disk_cannot_take_are_held_whole_and_written_in_order_once_there_is_room(tmp_path):
    fd = os.open("/dev/full", os.O_WRONLY)
    log = KeeperLog(fd)
    log("disk full on the console machine: free space in /runs/r1")   # raised inside the keeper's
    log.write("a traceback's line\n")                                 # error handler: it died
    assert len(log.held) == 2
    path = tmp_path / "keeper.log"
    os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), fd)   # room again
    log("room again\x1b[2J")
    lines = path.read_text().splitlines()
    assert lines[0].endswith(" disk full on the console machine: free space in /runs/r1"), lines
    assert lines[1] == "a traceback's line" and lines[2].endswith(" room again\\x1b[2J"), lines
    assert not log.held
    os.close(fd)
