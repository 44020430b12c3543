"""A bound on every training step, kept by one timer instead of one thread per collective.

``CommunicationOptions(timeout_seconds=T)`` makes TensorFlow 2.21 start a thread for every
collective that sleeps T seconds before it checks the collective. Measured on the demo job
(``examples/synthetic.py``, 2 workers, 2 cores): 4.4 new threads per step, so 26,000 live threads
per worker at 100 steps/s and T = 60 s; two workers on one host ran out of thread ids (Linux's
default ``pid_max`` of 32768) near step 3,400 and both aborted with
``std::system_error: Resource temporarily unavailable``. So the harness asks TensorFlow for no
timeout and keeps the bound itself: ``faulthandler``'s watchdog, which runs in C and needs no GIL
(TensorFlow may hold it while a collective waits), writes every thread's Python stack to the log
and ends the process (exit 1) when no step has finished for ``collective_timeout_s``. It is armed
again at most once a second, so it acts between T and T + 1 s after the last finished step. Its
first line, "Timeout (0:01:01)!", is what ``backend.diagnosis.diagnose`` recognises. Standard library only.
"""
from __future__ import annotations

import faulthandler
import time

# Each arm starts faulthandler's watchdog thread afresh: at most once a second, not per step.
REARM_EVERY_S = 1.0


class StepDeadline:
    """``step_done()`` after every step; ``close()`` when the loop ends, however it ends."""

    def __init__(self, timeout_s: float):
        self.timeout_s = float(timeout_s)
        self.armed_at: float | None = None

    def step_done(self) -> None:
        if self.timeout_s <= 0:
            return   # collective_timeout_s: 0 turns the bound off
        now = time.monotonic()
        if self.armed_at is None or now - self.armed_at >= REARM_EVERY_S:
            faulthandler.dump_traceback_later(self.timeout_s + REARM_EVERY_S, exit=True)
            self.armed_at = now

    def close(self) -> None:
        if self.armed_at is not None:
            faulthandler.cancel_dump_traceback_later()
            self.armed_at = None
