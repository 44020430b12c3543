"""Save on the signal for ``tfconsole.KerasCallback`` and ``tfconsole.Loop`` (harness/preempt.py holds the flag).

A preemption's signal (SIGTERM, or SIGUSR2 from Slurm's ``--signal``) or a ``stop --save``
request raises the sync gather's save flag to ``preempt.FLAG``: every worker saves that step,
fit stops, and once fit has ended the process exits ``preempt.EXIT_CODE`` (75) instead of
running the rest of the script as if training had finished.
"""
from __future__ import annotations

import os
import sys

from .harness import preempt


class SaveOnSignal:
    """One fit's (or one loop's) hold on the signals: made as training begins, ``end()`` as it ends."""

    def __init__(self, ctx, *, grace_s: float | None, exit_on_preempt: bool) -> None:
        """Take SIGTERM and SIGUSR2 from TensorFlow's notifier, which only logs them
        (docs/facts.md #10): the strategy exists by now, so this handler replaces its own."""
        self.task, self.exit_on_preempt = ctx.task, exit_on_preempt
        self.watch, self.record = preempt.Watch(), None
        self.watch.configure(task=ctx.task, run=ctx.run_dir, attempt=ctx.attempt,
                             grace_s=grace_s or preempt.DEFAULT_GRACE_S)
        self.watch.install()

    def flag(self, pending: list) -> float:
        """This worker's save flag for the meeting (preempt.save_flag, as the harness's):
        ``pending``: the chief's waiting Save-now requests (none on other workers)."""
        return preempt.save_flag(self.watch, pending)

    def saved(self, step: int, save_s: float = 0.0) -> None:
        """The signal's step is saved on this worker, in ``save_s`` (the caller stops training)."""
        self.watch.peer_flag()       # a worker that did not get the signal learnt it here
        self.record = self.watch.saved(step, save_s)

    def end(self) -> None:
        """Give the signals back; after a preemption, exit 75 instead of running the rest of the
        script as if training had finished (its final save would hold an unfinished model)."""
        self.watch.uninstall()
        record = self.record
        if record is None:
            return
        print(f"[{self.task}] tfconsole PREEMPTED: saved at step {record['step']} "
              f"({record['seconds']:.1f} s after the signal, grace {record['grace_s']:g} s)",
              flush=True)
        if self.exit_on_preempt:
            sys.stdout.flush()
            sys.stderr.flush()
            # os._exit: TensorFlow's collective teardown at exit can hang (harness/train.py).
            os._exit(preempt.EXIT_CODE)
