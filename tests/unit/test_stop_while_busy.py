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
