"""Work that outlives the click that asked for it: Start, Stop, Save now, Export and Restore
run in a thread of their own.

Streamlit stops a script at its next Streamlit call when the user clicks elsewhere; work done
inside the script can be cut off half way. So a button only hands its work to an ``Action`` here
and returns; the action runs to its end whatever the browser does, says what it is doing, and
any page of any session can show it (the ``Actions`` registry is shared). No Streamlit here.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from backend.access import identity
from backend.errors import ConsoleError


@dataclass
class Action:
    kind: str                  # "start", "stop", "save", "export", "restore"
    run_id: str
    began: float = field(default_factory=time.time)
    steps: list[str] = field(default_factory=list)   # what it has done so far, in words
    ended: float | None = None
    error: str = ""
    result: object = None
    summary: str = ""          # what the work says it did, shown once it ended well

    @property
    def done(self) -> bool:
        return self.ended is not None

    def say(self, step: str) -> None:
        self.steps.append(step)

    def line(self) -> str:
        took = (self.ended or time.time()) - self.began
        now = self.steps[-1] if self.steps else "starting"
        state = "failed" if self.error else ("done" if self.done else "working")
        return f"{self.kind} {self.run_id}: {state}, {now} ({took:.0f} s)"


class Actions:
    """Every action of this console process, by run id; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_run: dict[str, Action] = {}

    def submit(self, kind: str, run_id: str, work: Callable[[Action], object]) -> Action:
        """Run ``work(action)`` in a thread; refuse while another action on that run is going."""
        with self._lock:
            busy = self._by_run.get(run_id)
            if busy is not None and not busy.done and kind == busy.kind == "stop":
                return busy   # one stop at a time: a second (a click delivered twice) is the first
            if busy is not None and not busy.done and kind == "stop":
                # Stop is always possible: the running Save, Export or Restore loses its run
                # under it and ends with an error; it is marked so nobody waits on it.
                busy.say("abandoned: the run is being stopped")
            elif busy is not None and not busy.done:
                raise ConsoleError(f"run {run_id} is busy: {busy.line()}",
                                   "Wait for it to finish; its progress is shown on this page.")
            action = self._by_run[run_id] = Action(kind, run_id)
        # The work acts for whoever asked (a signed-in session's person: their roles, their audit
        # line), though its thread has no session to ask.
        who = identity.current()
        threading.Thread(target=_run, args=(action, work, who), name=f"{kind}-{run_id}", daemon=True).start()
        return action

    def get(self, run_id: str | None) -> Action | None:
        with self._lock:
            return self._by_run.get(run_id) if run_id else None

    def pending(self) -> list[Action]:
        with self._lock:
            return [a for a in self._by_run.values() if not a.done]


def _run(action: Action, work: Callable[[Action], object], who: identity.Identity) -> None:
    try:
        with identity.acting_as(who):
            action.result = work(action)
    except ConsoleError as err:
        action.error = str(err)
    except Exception:  # noqa: BLE001 - shown on the page rather than lost in a thread
        action.error = "unexpected error (please report it):\n" + traceback.format_exc(limit=5)
    finally:
        action.ended = time.time()
