"""Save on the signal: a kill announced by a signal ends the run with a checkpoint, not a loss.

Clusters warn before they kill: a time limit, a higher-priority job, a spot eviction or an
operator's drain sends SIGTERM (Slurm: ``--signal=USR2@<s>`` ahead of the time limit; SIGUSR1 is
the stack dump's, harness/stackdump.py), then KILL some seconds later (Slurm's ``KillWait``, 30 s
by default). ``Watch`` turns the signal into a flag: the harness puts it in the save flag of the
next sync all_gather, so every worker sees it at the same step, every worker saves that step
(docs/facts.md #5) and every worker exits ``EXIT_CODE`` with the line ``HARNESS PREEMPTED: saved
at step N`` and a ``tasks/<task>.preempted`` record the keeper reads. A worker that has not saved
``grace_s`` after the signal says so in its log; its previous checkpoint stays usable (a save is
complete only once its meta file is written, harness/ckpt_index.py).

Under MultiWorkerMirroredStrategy TensorFlow installs a C-level SIGTERM handler that only logs
"SIGTERM caught" (docs/facts.md #10): ``install`` must run again after the strategy is made; a
handler set from Python then replaces it. Standard library only.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time

from . import layout, requests_dir

EXIT_CODE = 75              # EX_TEMPFAIL ("try again later"): preempted, a checkpoint saved
SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
DEFAULT_GRACE_S = 25.0      # under Slurm's default KillWait of 30 s, with room for the exit
FLAG = 2.0                  # the value in the sync gather's save_flag (1.0: a save-now request)
SUFFIX = "preempted"        # tasks/<task>.preempted


def save_flag(watch, pending: list) -> float:
    """A worker's save flag in the meeting's row, for harness jobs, fit scripts and custom loops
    alike: FLAG once a signal came (or ``stop --save`` is among the chief's ``pending`` requests),
    1.0 while a Save now waits, else 0."""
    if requests_dir.stop_requested(pending):
        watch.request("stop --save")
    return FLAG if watch.pending else (1.0 if pending else 0.0)


def decide(flags) -> tuple[bool, bool]:
    """(save now, preempting) from every worker's flag: all workers read the same rows, so all
    save at the same step (a save skipped by one worker can deadlock the others: facts #5)."""
    flags = list(flags)
    return any(f > 0 for f in flags), any(f >= FLAG for f in flags)


def record_path(run: str, task: str) -> str:
    return layout.task_file(run, task, SUFFIX)


def _say(text: str) -> None:
    # os.write, not print: a signal handler may run while the main thread is inside print.
    try:
        os.write(1, (text + "\n").encode())
    except OSError:
        pass


class Watch:
    """The process's preemption flag. ``install`` (again after the strategy exists), then
    ``pending`` at each sync point, ``saved(step)`` once the step is saved on this worker."""

    def __init__(self) -> None:
        self.task, self.run, self.attempt, self.grace_s = "?", None, 0, DEFAULT_GRACE_S
        self.signum: int | None = None     # the signal this process got, if any
        self.at: float | None = None       # monotonic time of that signal or of the peer's flag
        self.old: dict = {}
        self._timer: threading.Timer | None = None
        self.saved_record: dict | None = None
        self.why: str | None = None        # what started it when no signal did (a stop request)

    def configure(self, *, task: str, run: str, attempt: int, grace_s: float) -> None:
        self.task, self.run, self.attempt, self.grace_s = task, run, attempt, float(grace_s)

    def install(self) -> None:
        for sig in SIGNALS:
            self.old.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        """Give the signals back to the handlers Python knew before ``install``."""
        for sig, old in self.old.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self.old = {}
        self._cancel()

    @property
    def pending(self) -> bool:
        return self.at is not None

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            return   # Slurm may send TERM after its USR2 warning: one save is enough
        self.signum = signum
        self._start(f"got {signal.Signals(signum).name}")

    def request(self, what: str) -> None:
        """A stop that saves first (a ``save-stop-*`` request): the same path as a signal."""
        if self.at is None:
            self.why = what
            self._start(what)

    def peer_flag(self) -> None:
        """Another worker got the signal: this one learnt it from the sync gather."""
        if self.at is None:
            self._start("a peer worker got the preemption signal")

    def _start(self, what: str) -> None:
        self.at = time.monotonic()
        _say(f"[{self.task}] {what}: every worker saves at the next sync point, then exits "
             f"(grace {self.grace_s:g} s)")
        self._timer = threading.Timer(self.grace_s, self._late)
        self._timer.daemon = True
        self._timer.start()

    def _late(self) -> None:
        _say(f"[{self.task}] PREEMPT GRACE EXCEEDED: no checkpoint saved within {self.grace_s:g} s "
             "of the signal; a kill now keeps the previous checkpoint (still usable). Lower "
             "log_every, or give more time (preempt_grace_s, Slurm --signal lead, KillWait).")

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def saved(self, step: int, save_s: float) -> dict:
        """Record the step this worker saved; the keeper and the console read the record."""
        self._cancel()
        elapsed = time.monotonic() - self.at if self.at is not None else 0.0
        record = {"step": int(step), "attempt": self.attempt, "task": self.task,
                  "signal": signal.Signals(self.signum).name if self.signum else self.why,
                  "seconds": round(elapsed, 3), "save_s": round(save_s, 3),
                  "grace_s": self.grace_s, "within_grace": elapsed <= self.grace_s,
                  "time": time.time()}
        if self.run:
            os.makedirs(os.path.join(self.run, layout.TASKS), exist_ok=True)
            tmp = record_path(self.run, self.task) + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(record, fh)
            os.replace(tmp, record_path(self.run, self.task))
        self.saved_record = record
        if not record["within_grace"]:
            _say(f"[{self.task}] PREEMPT GRACE EXCEEDED: step {step} saved {elapsed:.1f} s after "
                 f"the signal, over the grace of {self.grace_s:g} s")
        return record


WATCH = Watch()   # signals are per process: one watch for the whole process
