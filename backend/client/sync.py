"""Where the workers of a ``fit`` script (``KerasCallback``) or a custom loop (``Loop``) meet.

Every K steps each worker puts one row into one ``all_gather`` (harness/rows.meeting_layout, the
harness's row schema: its task index, its step time, its save flag, the step it proposes for the
next meeting, and its window's totals and counts of every metric). All workers read the same rows, so they all take the same
decisions: the next meeting is the largest proposal, a Save now (a flag above 0) or a preemption
(a flag at ``preempt.FLAG``, SaveOnSignal) is saved by every worker at the same step.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import tensorflow as tf

from .harness import nonfinite, preempt, profiling
from .harness.rows import LOSS, VAL_PREFIX
from . import keras_metrics, reporting

MIN_SYNC_S = 0.25   # by default, workers meet no more often than this (a gather costs ~3 ms)


def make_gather(strategy):
    @tf.function
    def gather(row):
        def replica(r):
            # all_gather in the replica context (all_reduce of an outside tensor fails: facts #3)
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.reshape(r, [1, -1]), axis=0)
        return strategy.run(replica, args=(row,))

    def call(row: list) -> list[list[float]]:
        out = gather(tf.constant(row, dtype=tf.float32))
        return strategy.experimental_local_results(out)[0].numpy().tolist()
    return call


@dataclass
class Met:
    """What one meeting decided, the same on every worker."""
    rows: list
    save_now: bool       # a Save now request (the chief's flag)
    preempting: bool     # a preemption's signal or ``stop --save`` on some worker
    first: bool          # this attempt's first meeting (its step time includes tracing)
    again: bool          # a second meeting at the same step (the epoch end after a sync)


class Meeting:
    """One worker's side of the meetings. ``every=K`` with ``fixed_every``: exactly every K steps;
    else at most every K steps and no more often than ``MIN_SYNC_S`` at this worker's step time."""

    def __init__(self, strategy, ctx, signal, *, every: int, fixed_every: bool, step: int) -> None:
        self.ctx, self.signal = ctx, signal
        self.every, self.fixed_every = every, fixed_every
        self.gather = make_gather(strategy) if len(ctx.tasks) > 1 else None
        self.first, self.synced_at = True, step
        self.t_sync, self.next_sync = time.time(), step + every
        # Ticked by the caller after every step (``profiler.tick``); begun at a meeting.
        self.profiler = profiling.Profiler(ctx.run_dir, ctx.task, ctx.is_chief,
                                           refused=profiling.MEETING_REFUSED)

    def due(self, step: int) -> bool:
        return self.first or step >= self.next_sync

    def meet(self, layout, step: int, *, train: dict, val: dict | None = None,
             now: float | None = None) -> Met:
        now = time.time() if now is None else now
        first, again = self.first, step == self.synced_at and not self.first
        # Wall time per step since the last meeting; the first includes tracing: no figure.
        step_time = math.nan if first or again else (now - self.t_sync) / max(1, step - self.synced_at)
        self.t_sync, self.synced_at, self.first = now, step, False
        flag = self.signal.flag(reporting.save_requests())
        states = {**train, **{VAL_PREFIX + n: v for n, v in (val or {}).items()}}
        row = layout.row({"task_index": self.ctx.task_index, "step_time": step_time, "save_flag": flag,
                          "next_sync": self.propose(step, step_time),
                          "profile_steps": self.profiler.flag()}, states)
        rows = layout.read_tasks(self.gather(row) if self.gather else [row])
        self.profiler.begin(step, [r["profile_steps"] for r in rows], first=first)
        self.next_sync = int(max(r["next_sync"] for r in rows))
        save_now, preempting = preempt.decide(r["save_flag"] for r in rows)
        return Met(rows, save_now=save_now, preempting=preempting, first=first, again=again)

    def propose(self, step: int, step_time: float) -> int:
        """The step of the next meeting, on multiples of ``every`` (as a harness job logs)."""
        if self.fixed_every or not step_time > 0:   # NaN (first step) included
            return (step // self.every + 1) * self.every
        ahead = max(self.every, math.ceil(MIN_SYNC_S / step_time))
        return -(-(step + ahead) // self.every) * self.every


def values(rows: list, tasks: tuple) -> dict:
    """What a meeting's rows say, the same on every worker: each worker's loss (NaN where it
    counted none), step time and own metrics, and the global values (summed state)."""
    km = keras_metrics
    return {"losses": {tasks[r.task_index]: r.value(LOSS) if LOSS in r.layout.metrics else math.nan
                       for r in rows},
            "times": {tasks[r.task_index]: r["step_time"] for r in rows},
            "metrics": km.per_worker(rows, tasks), "global": km.global_values(rows)}


class Health:
    """NaN and Inf at every meeting, as the harness checks its own (harness/nonfinite.py): every
    worker reads the same rows, so all find the same bad value at the same step. The chief writes
    ``health.json``, every worker its versions (``status`` shows both); with ``stop=True`` every
    worker raises ``NonFiniteLoss`` there, and none is left waiting in a collective. Only counted
    values are looked at: a window a worker did not train in is no NaN."""

    def __init__(self, ctx, keras, *, stop: bool) -> None:
        self.ctx, self.keras, self.kept = ctx, keras, None
        self.watch = nonfinite.Watch(ctx.run_dir, is_chief=ctx.is_chief, stop=stop)

    def check(self, step: int, rows: list) -> None:
        km, tasks = keras_metrics, self.ctx.tasks
        values = {t: {**m, **km.per_worker(rows, tasks, km.VAL).get(t, {})}
                  for t, m in km.per_worker(rows, tasks).items()}
        if self.kept is None and nonfinite.non_finite(values):
            self.kept = nonfinite.write_versions(self.ctx.run_dir, self.ctx.task, self.keras)
        self.watch.check(step, values, self.kept or {})
