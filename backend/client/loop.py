"""``tfconsole.Loop``: what ``KerasCallback`` does for fit, for a custom training loop.

    loop = tfconsole.Loop(strategy, checkpoint_manager, model=model, metrics=[train_accuracy])
    ...
        per_replica_losses = loop.run(step_fn, args=(next(iterator),))   # was strategy.run
    ...
        step_in_epoch.assign_add(1)
        loop.step()           # last in the step's body: a save inside it holds the script's counters

- ``loop.run`` (inside the script's ``tf.function``, in place of ``strategy.run``) adds each
  replica's own loss to a local sum-on-read total and count: no collective. **The own-loss
  rule**: the step function returns ``tf.nn.compute_average_loss(per_example,
  global_batch_size=G)`` (TensorFlow's tutorial), which is the replica's sum over G, so the
  replica's own mean loss is that value x ``num_replicas_in_sync`` (its batch is G / replicas).
  ``loss_is="replica_mean"`` when the step returns the replica's own mean instead.
- ``loop.step(value=None)`` last in each step's body (returns ``value``): at an attempt's first step and then
  every 10 steps but no more often than every 0.25 s (``every=K``: exactly every K steps), all
  workers meet in one ``all_gather`` of a row (rows.meeting_layout: task, step time, save flag,
  next sync, then the loss's and each metric's total and count since the last sync), the same
  gather and schedule as the Keras callback; the chief writes every worker's line (per worker:
  own total / own count; global: summed totals / summed counts).
- Save now and preemption ride in that gather as the flag (1: a request on the chief, 2: SIGTERM
  or SIGUSR2 on any worker): every worker saves at that same step. After a preemption's save
  the process exits 75.
- Checkpoints: given the script's ``tf.train.CheckpointManager`` (made on
  ``tfconsole.checkpoint_dir()``), its ``save()`` names each checkpoint by the loop's step
  (``checkpoint_number``) and writes ``ckpt-<step>.meta.json`` with every worker's loss and the
  global metrics, so the console lists it; given a ``tf.train.Checkpoint``, ``loop.save()``
  writes it in the harness layout with the harness's retention. Every worker calls it at the
  same step (TensorFlow's rule: docs/facts.md #5).
- Restore: with ``TFCONSOLE_RESUME_STEP`` the loop restores that step from this worker's own
  folder when it is made, and the step count goes on from it.
- Export: ``model=`` (or ``build_model=``) is written to RUN/checkpoints/model.json after the
  first step, as the callback does; Export rebuilds the model from it with no strategy.

Outside a console run the loop does nothing: ``run`` is ``strategy.run``, ``step`` returns its
value, the manager is left alone.

Why one file of this size: ``Loop`` is what a user imports and reads (``tfconsole.Loop``): its one
class keeps the own-loss rule, the sync point, saves and the stop in the order a step meets them,
so a user reads one file to know what their loop does.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

import tensorflow as tf

from .harness import ckpt_index, layout, metric_line, retention, rows, train_info
from .harness import loop as hloop
from . import checkpoints, keras_metrics, model_desc, reporting
from .save_on_signal import SaveOnSignal
from . import sync
from .sync import Health, Meeting

LOSS_IS = ("global_average", "replica_mean")


class Loop:
    def __init__(self, strategy=None, checkpoint=None, *, model=None, build_model=None,
                 metrics=None, loss_is: str = "global_average", every: int | None = None,
                 keep_checkpoints: int = 5, epoch=None, total_steps: int | None = None,
                 preempt_grace_s: float | None = None, exit_on_preempt: bool = True,
                 stop_on_nan: bool = False, keep_best: int = 0, best_metric: str = "loss",
                 best_mode: str = "min", optimizer=None, scale_learning_rate: bool = True) -> None:
        if loss_is not in LOSS_IS:
            raise ValueError(f"tfconsole.Loop: loss_is={loss_is!r}; use \"global_average\" (the "
                             "step returns tf.nn.compute_average_loss(..., global_batch_size=...)) "
                             "or \"replica_mean\" (the step returns the replica's own mean loss)")
        self.strategy = strategy or tf.distribute.get_strategy()
        self.manager, self.checkpoint = _split(checkpoint)
        self.model, self.build_model = model, build_model
        self.metrics = _mean_metrics(metrics)
        self.best = retention.best_options("tfconsole.Loop", keep_best, best_metric, best_mode)
        if keep_best and best_metric not in ("loss", *self.metrics):
            raise ValueError(f"tfconsole.Loop: best_metric {best_metric!r} is not a metric of this "
                             f"loop; it has {', '.join(('loss', *self.metrics))}")
        self.scale = self.strategy.num_replicas_in_sync if loss_is == "global_average" else 1
        self.fixed_every, self.every = every is not None, max(1, int(every or 10))
        self.keep, self.epoch_source, self.total_steps = int(keep_checkpoints), epoch, total_steps
        self.preempt_grace_s, self.exit_on_preempt = preempt_grace_s, exit_on_preempt
        self.ctx = reporting.context()
        self.active = self.ctx.in_run
        self.n = 0   # steps finished: the step number of lines and checkpoints
        if not self.active:
            return
        with self.strategy.scope():   # each replica's own running sum: read locally, no collective
            on_read = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM, dtype=tf.float32)
            self._total = tf.Variable(0.0, name="tfconsole_loss_total", **on_read)
            self._count = tf.Variable(0.0, name="tfconsole_loss_count", **on_read)
        self.cols = rows.meeting_layout(("loss", *self.metrics))
        self.versions = {"tensorflow": tf.__version__}
        if model is not None:
            self.versions["keras"] = getattr(sys.modules.get(model_desc.keras_of(model)),
                                             "__version__", None)
        self._check_manager()
        if build_model is not None:
            model_desc.builder_entry(build_model)   # refused now, not after the first step
        opt = self._optimizer(optimizer) if scale_learning_rate else None
        base = hloop.base_learning_rate(opt, self.ctx.lr_scale, fix=(
            "give the optimizer a number, or pass Loop(scale_learning_rate=False) and scale it "
            "yourself")) if opt is not None else None
        if self.ctx.resume_step:
            self._restore(int(self.ctx.resume_step))
        scaled = hloop.scale_learning_rate(opt, base, self.ctx.lr_scale)
        if scaled:   # after the restore, which brings back the rate the checkpoint was saved with
            print(f"[{self.ctx.task}] tfconsole: {scaled}", flush=True)
        self.mark, self.carry, self.last = {}, {}, None
        self._watch_resets()
        self.saved_at, self.saved_path = None, None
        if self.manager is not None:
            self._wrap_manager()
        if self.ctx.is_chief:
            self._write_train_json()
        # Takes SIGTERM/SIGUSR2 from TensorFlow's notifier (docs/facts.md #10): the strategy
        # exists by now, so this handler replaces its own.
        self.signal = SaveOnSignal(self.ctx, grace_s=preempt_grace_s, exit_on_preempt=exit_on_preempt)
        self.meeting = Meeting(self.strategy, self.ctx, self.signal, every=self.every,
                               fixed_every=self.fixed_every, step=self.n)
        self.health = Health(self.ctx, sys.modules.get(model_desc.keras_of(model)) if model is not None
                             else None, stop=stop_on_nan)

    def _optimizer(self, given):
        """The optimizer whose rate a shrink scales: ``optimizer=``, the checkpoint's or the
        model's; None (said once) where the loop sees none, or the run never shrank."""
        if self.ctx.lr_scale == 1.0:
            return None
        opt = (given or getattr(self.checkpoint, "optimizer", None)
               or getattr(self.model, "optimizer", None))
        if opt is None:
            print(f"[{self.ctx.task}] tfconsole: the run shrank (learning rate x"
                  f"{self.ctx.lr_scale:.4g}) but the loop sees no optimizer: pass "
                  "Loop(optimizer=...), or scale it by tfconsole.context().lr_scale", flush=True)
        return opt

    # ---- inside the step ----------------------------------------------------------------------
    def run(self, fn, args=(), kwargs=None):
        """``strategy.run(fn, args, kwargs)`` that also adds each replica's own loss (``fn``'s
        result: a scalar, the first of a tuple, or a dict's "loss") to its local total."""
        if not self.active:
            return self.strategy.run(fn, args=args, kwargs=kwargs)

        def replica(*a, **k):
            out = fn(*a, **k)
            loss = tf.cast(_loss_of(out), tf.float32)
            self._total.assign_add(loss * float(self.scale))
            self._count.assign_add(1.0)
            return out
        return self.strategy.run(replica, args=args, kwargs=kwargs)

    # ---- after the step -----------------------------------------------------------------------
    def step(self, value=None):
        """Count a finished step; at a sync point gather, report, and save when asked."""
        if not self.active:
            return value
        self.n += 1
        self.meeting.profiler.tick(self.n)
        if self.meeting.due(self.n):
            save_now, preempting = self._sync()
            if save_now or preempting:
                self._save(answer=save_now, preempting=preempting)
        return value

    @property
    def current_step(self) -> int:
        return self.n

    def save(self):
        """Save at this step (every worker calls it at the same step). The checkpoint is
        ``ckpt-<step>`` in ``checkpoint_dir()`` with its metadata: the console lists it."""
        if not self.active:
            return self.manager.save() if self.manager is not None else None
        save_now, preempting = (False, False) if self.meeting.synced_at == self.n else self._sync()
        return self._save(answer=save_now, preempting=preempting)

    # ---- the sync point -----------------------------------------------------------------------
    def _local_state(self) -> dict:
        own = {"loss": (keras_metrics.local_sum(self.strategy, self._total),
                        keras_metrics.local_sum(self.strategy, self._count))}
        return {**own, **keras_metrics.local_state(self.strategy, self.metrics)}

    def _watch_resets(self) -> None:
        """A metric the script resets (the tutorial does, every epoch) keeps the part of the
        window before the reset: its state then is carried into the next metric_line."""
        for name, metric in self.metrics.items():
            def reset(*a, _orig=metric.reset_state, _name=name, _metric=metric, **k):
                t, c = keras_metrics.local_state(self.strategy, {_name: _metric})[_name]
                t0, c0 = self.mark.get(_name, (0.0, 0.0))
                ct, cc = self.carry.get(_name, (0.0, 0.0))
                self.carry[_name] = (ct + t - t0, cc + c - c0)
                self.mark[_name] = (0.0, 0.0)
                return _orig(*a, **k)
            metric.reset_state = reset

    def _sync(self) -> tuple[bool, bool]:
        state = self._local_state()
        window, self.mark = _delta(state, self.mark, self.carry), state
        self.carry = {}
        met = self.meeting.meet(self.cols, self.n, train=window)
        self.last = sync.values(met.rows, self.ctx.tasks)
        if self.ctx.is_chief:
            reporting.report(self.n, epoch=self._epoch(), losses=self.last["losses"],
                             step_time=self.last["times"], metrics=self.last["metrics"],
                             global_metrics=self.last["global"])
            if met.first:
                self._write_model_json()   # after a step: the model is built
        self.health.check(self.n, met.rows)
        return met.save_now, met.preempting

    def _epoch(self) -> int:
        """1-based: ``epoch=`` (a variable, a callable or a number, 0-based like the tutorial's
        ``epoch`` variable), else the checkpoint's own ``epoch`` variable, else 1."""
        src = self.epoch_source
        if src is None and self.checkpoint is not None:
            src = getattr(self.checkpoint, "epoch", None)
            if not isinstance(src, tf.Variable):
                return 1
        if src is None:
            return 1
        value = src() if callable(src) and not isinstance(src, tf.Variable) else src
        return int(value.numpy() if hasattr(value, "numpy") else value) + 1

    # ---- saving -------------------------------------------------------------------------------
    def _save(self, *, answer: bool, preempting: bool):
        if self.saved_at != self.n:
            t0 = time.monotonic()
            self.saved_path = self._write_checkpoint()
            self.saved_at, save_s = self.n, time.monotonic() - t0
            if self.ctx.is_chief:   # on the next line: goodput's checkpoint saves
                reporting.BLOCKED.add("save", save_s)
            print(f"[{self.ctx.task}] tfconsole: saved checkpoint {self.saved_path}"
                  f"{' (save-now request)' if answer else ''}", flush=True)
        else:
            save_s = 0.0
        if answer and self.ctx.is_chief:
            reporting.saved(self.n)
        if preempting:
            self._preempted(save_s)
        return self.saved_path

    def _write_checkpoint(self):
        if self.checkpoint is None:
            raise RuntimeError("tfconsole.Loop: a Save now or a preemption needs the checkpoint: "
                               "make the loop with tfconsole.Loop(strategy, checkpoint_manager) "
                               "or tfconsole.Loop(strategy, checkpoint)")
        values = self.last or {"losses": {}, "global": {}}
        common = dict(epoch=self._epoch(), losses=values["losses"], metrics=values["global"],
                      versions=self.versions)
        if self.manager is None:
            return checkpoints.save(self.checkpoint, self.n, keep=self.keep, **common, **self.best)
        directory = self.manager.directory
        meta = ckpt_index.meta_path(directory, self.n)
        if os.path.exists(meta):   # an older attempt's: a half-written save must not look complete
            os.unlink(meta)
        policy = self._manager_policy(directory)
        # Under retention's lock, as a pin takes it: a step the console holds (an export, a
        # chosen restore) and the keep_best best are out of the manager's max_to_keep sweep.
        with retention.locked(directory):
            held = {int(h["step"]) for h in retention.live_holds(directory, time.time()).values()}
            if policy:
                held |= retention.best(ckpt_index.list_complete(directory), policy)
            with _spared(self.manager, {ckpt_index.prefix_path(directory, s) for s in held}):
                path = self._orig_save(checkpoint_number=self.n)
            checkpoints.write_meta(directory, self.n, **common)
            _drop_orphan_meta(directory)   # the manager's max_to_keep deleted older saves
        return path

    def _manager_policy(self, directory: str):
        """With keep_best, the script's manager keeps its own last ``max_to_keep`` and the loop
        the best: written as retention's policy, so the console lists both and nothing else."""
        if not self.best["keep_best"]:
            return None
        last = getattr(self.manager, "_max_to_keep", None) or 0   # None: the manager keeps all
        policy = retention.Policy(keep_last=int(last), grace_s=0.0, **self.best)
        retention.write_policy(directory, policy)
        return policy

    def _check_manager(self) -> None:
        """A manager writing elsewhere than checkpoint_dir() would save checkpoints the console
        never lists: refuse now, saying where it must write."""
        if self.manager is None:
            return
        want = reporting.checkpoint_dir()
        if os.path.realpath(self.manager.directory) != os.path.realpath(want):
            raise ValueError(f"tfconsole.Loop: the CheckpointManager writes to "
                             f"{self.manager.directory}, where the console does not look; make it "
                             f"with directory=tfconsole.checkpoint_dir() ({want} for {self.ctx.task})")

    def _wrap_manager(self) -> None:
        """The script's own ``manager.save()`` (at its epoch ends, say) goes through the loop:
        numbered by the step, with its metadata, so the console lists it."""
        self._orig_save = self.manager.save

        def save(checkpoint_number=None, check_interval=True, options=None):
            if checkpoint_number is not None and int(checkpoint_number) != self.n:
                print(f"[{self.ctx.task}] tfconsole: manager.save(checkpoint_number="
                      f"{checkpoint_number}) at step {self.n}: saved as ckpt-{self.n} (the console "
                      "lists checkpoints by the loop's step)", flush=True)
            return self.save()
        self.manager.save = save

    def _restore(self, step: int) -> None:
        if self.checkpoint is None:
            raise RuntimeError(f"tfconsole.Loop: this attempt resumes from step {step}, but the "
                               "loop has no checkpoint to restore it into: make it with "
                               "tfconsole.Loop(strategy, checkpoint_manager)")
        _build_optimizer(self.strategy, self.checkpoint, self.model)
        checkpoints.restore(self.checkpoint, step)
        self.n = step
        print(f"[{self.ctx.task}] tfconsole: restored step {step}; the next step is {step + 1}",
              flush=True)

    # ---- files the chief writes ---------------------------------------------------------------
    def _write_train_json(self) -> None:
        train_info.write(self.ctx.run_dir, source="tfconsole.Loop", run_id=self.ctx.run_id,
                         attempt=self.ctx.attempt, total_steps=self.total_steps, steps_per_epoch=None,
                         epochs=None, start_step=self.n, tasks=self.ctx.tasks,
                         params={"log_every": self.every, "keep_checkpoints": self.keep},
                         versions=self.versions)

    def _write_model_json(self) -> None:
        model = self.model
        if model is None and self.build_model is None:
            return   # Export refuses, naming the call (harness/export.py)
        key = model_desc.checkpoint_key(self.checkpoint, model) if self.checkpoint else "model"
        entry = model_desc.describe(model, key=key, build=self.build_model)
        directory = reporting.checkpoint_dir()
        os.makedirs(directory, exist_ok=True)
        ckpt_index.write_json_atomic(
            os.path.join(directory, layout.MODEL_CONFIG), entry)

    def _preempted(self, save_s: float) -> None:
        """Every worker saved the signal's step: say so and exit 75 (SaveOnSignal.end)."""
        self.signal.saved(self.n, save_s)
        reporting.close()
        self.signal.end()


# ---- helpers --------------------------------------------------------------------------------------
def _split(checkpoint):
    """(manager or None, checkpoint or None) from what the script gave."""
    if checkpoint is None:
        return None, None
    if isinstance(checkpoint, tf.train.CheckpointManager):
        return checkpoint, checkpoint.checkpoint
    if isinstance(checkpoint, tf.train.Checkpoint):
        return None, checkpoint
    raise ValueError(f"tfconsole.Loop: the second argument is a {type(checkpoint).__name__}; give "
                     "the script's tf.train.CheckpointManager or tf.train.Checkpoint")


def _mean_metrics(metrics) -> dict:
    """{name: metric} of Keras metrics with a total and a count (per worker and global values
    need them); anything else is refused by name."""
    items = metrics.items() if isinstance(metrics, dict) else [(m.name, m) for m in metrics or []]
    out = {}
    for name, metric in items:
        problem = metric_line.name_problem(name) or ("the loss has its own column" if name == "loss" else None)
        if problem:
            raise ValueError(f"tfconsole.Loop: metric name {name!r}: {problem}")
        if not keras_metrics.is_mean(metric):
            raise ValueError(f"tfconsole.Loop: metric {name!r} ({type(metric).__name__}) has no "
                             "total and count, so it has no per-worker value; give mean metrics "
                             "(Mean, Accuracy, SparseCategoricalAccuracy, MAE ...) or report it "
                             "yourself with tfconsole.report(global_metrics=...)")
        out[name] = metric
    if len(out) > keras_metrics.BUDGET - 1:
        raise ValueError(f"tfconsole.Loop: {len(out)} metrics; at most {keras_metrics.BUDGET - 1}")
    return out


def _loss_of(out):
    if isinstance(out, dict):
        if "loss" not in out:
            raise ValueError("tfconsole.Loop.run: the step function returned a dict without "
                             "\"loss\"; return the loss, (loss, ...) or {\"loss\": loss, ...}")
        return out["loss"]
    return out[0] if isinstance(out, (tuple, list)) else out


def _delta(now: dict, before: dict, carry: dict) -> dict:
    """The change of each (total, count) since ``before``, plus what a reset carried over; a
    count that went down was reset some other way, so it counts from zero."""
    out = {}
    for name, (total, count) in now.items():
        t0, c0 = before.get(name, (0.0, 0.0))
        ct, cc = carry.get(name, (0.0, 0.0))
        t, c = (total, count) if count < c0 else (total - t0, count - c0)
        out[name] = (t + ct, c + cc)
    return out


@contextlib.contextmanager
def _spared(manager, paths: set):
    """Take ``paths`` out of the manager's deletion queue for one save, then put them back as
    its oldest (the next sweep after their hold ends deletes them). ``_maybe_delete`` is
    CheckpointManager's queue since TF 2.0; without it, nothing is spared."""
    queue = getattr(manager, "_maybe_delete", None)
    spared = {p: queue.pop(p) for p in list(queue or {}) if p in paths}
    try:
        yield
    finally:
        if spared:
            rest = dict(queue)
            queue.clear()
            queue.update({**spared, **rest})


def _drop_orphan_meta(directory: str) -> None:
    for step in ckpt_index.list_partial(directory):
        if not os.path.exists(ckpt_index.prefix_path(directory, step) + ".index"):
            try:
                os.unlink(ckpt_index.meta_path(directory, step))
            except FileNotFoundError:
                pass


def _build_optimizer(strategy, checkpoint, model) -> None:
    """Create the optimizer's slots before restoring, so the restore fills them at once."""
    opt = getattr(checkpoint, "optimizer", None)
    model = model if model is not None else getattr(checkpoint, "model", None)
    if opt is None or model is None or not hasattr(opt, "build"):
        return
    if getattr(opt, "built", getattr(opt, "_built", True)) is False:
        with strategy.scope():
            opt.build(model.trainable_variables)
