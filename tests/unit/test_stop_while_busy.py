"""Stop is never refused as "busy" while Save, Export or Restore runs (issue 27)."""
from __future__ import annotations

import threading
import time

import pytest

from backend.errors import ConsoleError
from console.background import Actions


def test_stop_is_accepted_while_an_export_runs_and_marks_it_abandoned():
    actions, release = Actions(), threading.Event()
    export = actions.submit("export", "r1", lambda a: release.wait(30))
    with pytest.raises(ConsoleError, match="busy"):
        actions.submit("save", "r1", lambda a: None)    # other actions still wait their turn
    stop = actions.submit("stop", "r1", lambda a: "stopped")
    deadline = time.time() + 10
    while not stop.done:
        assert time.time() < deadline
        time.sleep(0.01)
    assert stop.result == "stopped" and not stop.error
    assert "abandoned" in export.line()
    release.set()


def test_a_second_stop_while_one_runs_is_that_stop_and_stops_nothing_again():
    """One Stop click delivered twice by a busy console (issue 35): one stop runs, and both
    deliveries show its progress and its result."""
    actions, release, ran = Actions(), threading.Event(), []

    def stop(action):
        ran.append(action)
        release.wait(30)
        return "stopped"
    first = actions.submit("stop", "r1", stop)
    again = actions.submit("stop", "r1", stop)
    assert again is first and actions.get("r1") is first
    release.set()
    deadline = time.time() + 10
    while not first.done:
        assert time.time() < deadline
        time.sleep(0.01)
    assert ran == [first] and first.result == "stopped"
    later = actions.submit("stop", "r1", lambda a: "again")   # a stop after it ended: a new one
    assert later is not first
