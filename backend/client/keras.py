"""``tfconsole.KerasCallback()``: every compiled metric per worker, validation, the learning rate,
Save now and listed checkpoints for fit.

Works with Keras 2 (``tf_keras``, ``TF_USE_LEGACY_KERAS=1``) under MultiWorkerMirroredStrategy
and with Keras 3 under one worker or MirroredStrategy (Keras 3 ``fit`` fails under MWMS:
docs/facts.md #1). Outside a console run it does nothing.

Why not Keras' logged numbers: under MWMS tf_keras' per-batch ``logs`` are N x the global mean
(docs/facts.md #2). Each worker reads its own metric state (every mean metric's local
``total``/``count``, ``experimental_local_results``: no collective). At an attempt's first
step, at every checkpoint step, at every epoch end and then every 10 steps but no more often
than every 0.25 s (or exactly every ``every`` steps when given), all workers meet in one
``all_gather`` of a row (harness/rows.meeting_layout: task, step_time, save_flag, next_sync,
then each mean metric's total and count since the last sync, training and validation; a tf.function
called from the callback, ~3 ms here: bench/README.md); each row proposes the next sync step
from its step time and all take the largest, so they meet again at one step. From the rows:
a worker's value = its own total/count, the global value = sum of totals / sum of counts
(keras_metrics.py). Metrics without total/count (AUC, Precision ...) are global-only, read from
the epoch-end ``logs``. The epoch end's sync comes after validation (``on_epoch_end``): its
rows also carry each worker's validation state, read in ``on_test_end``, so val_* per worker and
global cost no extra collective, and the epoch-end checkpoint's metadata holds them (keep-best
by ``best_metric`` can use val_loss). The learning rate rides on every line as a global value.

The chief writes every worker's line and, when a Save now is waiting, raises the flag so every
worker saves at that same step. A preemption's signal (SIGTERM, or SIGUSR2 from Slurm's
``--signal``) raises the same flag to 2: every worker saves that step, fit stops, and the process
exits 75 (save_on_signal.py, harness/preempt.py).
"""
from __future__ import annotations

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


def keras_module():
    """The Keras the script trains with: tf_keras under TF_USE_LEGACY_KERAS, else Keras 3."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")
    if legacy or ("tf_keras" in sys.modules and "keras" not in sys.modules):
        import tf_keras
        return tf_keras
    import keras
    return keras


# Where the last fit() in this process ended, (step, epoch), whichever model it trained: a script
# that fits in stages (several fit() calls, on this model or a new or reloaded one, as the Keras
# guide's run_training() does) gets one rising step count, so its metrics and checkpoints go on
# (steps 61-120 ...) instead of starting over and writing ckpt-60 again; and an attempt's resume
# belongs to its first fit only (docs/job-contract.md, "Restore and fit").
_LAST_FIT: dict[str, tuple[int, int]] = {}


class _Hooks:
    def __init__(self, *, every: int | None = None, checkpoint_every: int = 0, keep_checkpoints: int = 5,
                 batch_size: int | None = None, save_at_epoch_end: bool = True,
                 preempt_grace_s: float | None = None, exit_on_preempt: bool = True,
                 keep_best: int = 0, best_metric: str = "loss", best_mode: str = "min",
                 stop_on_nan: bool = False, scale_learning_rate: bool = True) -> None:
        super().__init__()
        self.scale_lr = scale_learning_rate   # False: the script scales by ctx.lr_scale itself
        self.preempt_grace_s, self.exit_on_preempt = preempt_grace_s, exit_on_preempt
        self.stop_on_nan = stop_on_nan   # every worker raises NonFiniteLoss at the first NaN/Inf
        # every=None: at most every 10 steps and no more often than MIN_SYNC_S (a gather costs
        # ~3 ms: at 5 ms steps, every 10 steps would cost 6 %); every=K: exactly every K steps.
        self.fixed_every = every is not None
        self.every, self.checkpoint_every = max(1, int(every or 10)), int(checkpoint_every)
        self.keep, self.batch_size = int(keep_checkpoints), batch_size
        self.best = retention.best_options("tfconsole.KerasCallback", keep_best, best_metric, best_mode)
        self.save_at_epoch_end = save_at_epoch_end
        self.active, self.epoch_base, self.in_fit = False, 0, False
        # This callback never reads per-batch `logs`: without this, tf_keras turns every batch's
        # logs into numpy for it, a host sync at every step.
        self._supports_tf_logs = True

    # ---- start ------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self.ctx = reporting.context()
        self.active = self.ctx.in_run
        if not self.active:
            return
        model, self.strategy = self.model, self.model.distribute_strategy
        with self.strategy.scope():
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfconsole_step")
        self.ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer, step=self.step_var)
        kmod = keras_module()
        self.versions = {"tensorflow": tf.__version__, "keras": kmod.__version__}
        self.step, self.epoch = 0, 1
        self.epoch_base = 0
        carried = _LAST_FIT.get("end")
        base = self._base_learning_rate()
        if carried:   # a later fit() in this process, of any model: count on, restore nothing
            self.step, self.epoch_base = carried
            self.epoch = self.epoch_base + 1
        elif self.ctx.resume_step:
            self._restore(int(self.ctx.resume_step))
        scaled = hloop.scale_learning_rate(model.optimizer, base, self.ctx.lr_scale)
        if scaled:   # after the restore, which brings back the rate the checkpoint was saved with
            model.optimizer._tfconsole_scaled = True
            print(f"[{self.ctx.task}] tfconsole: {scaled}", flush=True)
        self.cols, self.in_fit = None, True
        self.mark, self.train_state, self.val_state = {}, None, None
        self.last, self.saved_at = None, None
        if self.ctx.is_chief:
            self._write_train_json()
        self.save_on_signal = SaveOnSignal(self.ctx, grace_s=self.preempt_grace_s,
                                           exit_on_preempt=self.exit_on_preempt)
        self.meeting = Meeting(self.strategy, self.ctx, self.save_on_signal, every=self.every,
                               fixed_every=self.fixed_every, step=self.step)
        self.health = Health(self.ctx, kmod, stop=self.stop_on_nan)

    def _base_learning_rate(self) -> float | None:
        """The script's own rate, to multiply by the shrink's scale, once per optimizer (a later
        fit on the same model finds it scaled already); None: nothing to scale."""
        opt = self.model.optimizer
        if not self.scale_lr or getattr(opt, "_tfconsole_scaled", False):
            return None
        return hloop.base_learning_rate(opt, self.ctx.lr_scale, fix="compile with a number, or pass "
                                        "KerasCallback(scale_learning_rate=False) and scale it yourself")

    def _restore(self, step: int) -> None:
        opt = self.model.optimizer
        # Create the optimizer's slots now, so the restore fills them instead of deferring.
        if hasattr(opt, "build") and getattr(opt, "built", getattr(opt, "_built", True)) is False:
            with self.strategy.scope():
                opt.build(self.model.trainable_variables)
        meta = checkpoints.restore(self.ckpt, step)
        self.step = step
        self.epoch = int(meta.get("epoch") or 1)
        note = ""
        if hasattr(self.model, "_training_state"):   # tf_keras: go on from that batch
            self.model._maybe_load_initial_counters_from_ckpt = self._resume_at(step)
        elif hasattr(self.model, "_initial_epoch"):
            note = self._resume_keras3(step)
        print(f"[{self.ctx.task}] tfconsole: restored step {step}{note}", flush=True)

    def _resume_at(self, step: int):
        """tf_keras asks the model where fit starts (epoch, batch) once every callback's
        on_train_begin has run. A ``BackupAndRestore`` in the same fit sets its own training state
        there and loads its own backup (a newer epoch while the run lives; none, so epoch 0, after
        it finished), before or after this callback: answered here, the console's step is the
        last word whatever the order, and its weights are loaded again over the backup's."""
        model, task = self.model, self.ctx.task

        def counters(steps_per_epoch, initial_epoch):
            del model._maybe_load_initial_counters_from_ckpt   # this fit only
            if model._training_state is not None:   # a BackupAndRestore loaded its backup
                checkpoints.restore(self.ckpt, step)
                print(f"[{task}] tfconsole: BackupAndRestore's backup set aside: the console "
                      f"resumes at step {step}", flush=True)
            if not steps_per_epoch:
                return initial_epoch, 0
            return divmod(int(step), int(steps_per_epoch))
        return counters

    def _resume_keras3(self, step: int) -> str:
        """Keras 3 reads ``model._initial_epoch`` after on_train_begin (as its BackupAndRestore
        sets it) but has no mid-epoch start: fit goes on at the restored step's epoch, and a
        step inside an epoch makes it redo that epoch's first batches (on fresh data), so the
        step count stays epoch-aligned and fit runs the epochs it was asked for."""
        spe = self.params.get("steps")
        epoch = step // int(spe) if spe else max(0, self.epoch - 1)
        self.model._initial_epoch = epoch
        self.resumed_epoch = True
        if not spe or step == epoch * int(spe):
            return f" (Keras 3: fit goes on at epoch {epoch + 1})"
        self.step = epoch * int(spe)
        return (f" (Keras 3 has no mid-epoch start: epoch {epoch + 1} starts over and redoes steps "
                f"{self.step + 1}-{step})")

    def _write_train_json(self) -> None:
        spe, epochs = self.params.get("steps"), self.params.get("epochs")
        train_info.write(self.ctx.run_dir, source="tfconsole.KerasCallback", run_id=self.ctx.run_id,
                         attempt=self.ctx.attempt, total_steps=spe * epochs if spe and epochs else None,
                         steps_per_epoch=spe, epochs=epochs, start_step=self.step, tasks=self.ctx.tasks,
                         params={"log_every": self.every, "checkpoint_every": self.checkpoint_every,
                                 "keep_checkpoints": self.keep}, versions=self.versions)

    def _write_model_config(self, kmod) -> None:
        """What export needs to rebuild the model with no strategy and no job module: the
        architecture (``to_json``: no compile, no weights; no collective, so the chief alone
        writes it), which Keras, and the inputs' shapes for a probe batch."""
        entry = {"keras": kmod.__name__, "keras_version": kmod.__version__,
                 "tensorflow": tf.__version__, "time": time.time(),
                 **model_desc.architecture(self.model)}
        directory = reporting.checkpoint_dir()
        os.makedirs(directory, exist_ok=True)
        ckpt_index.write_json_atomic(
            os.path.join(directory, layout.MODEL_CONFIG), entry)

    # ---- every batch --------------------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = self.epoch_base + int(epoch) + 1
        # Keras resets its metrics before this call: the state counts from zero again.
        self.mark, self.train_state, self.val_state = {}, None, None

    def on_train_batch_end(self, batch, logs=None):
        if not self.active:
            return
        self.step += 1
        self.t_batch = time.time()
        self.meeting.profiler.tick(self.step)
        spe = self.params.get("steps")
        if spe and (int(batch) + 1) % int(spe) == 0:
            return   # the epoch end's sync (on_epoch_end, after validation) covers this step
        ckpt_due = self.checkpoint_every > 0 and self.step % self.checkpoint_every == 0
        # Every worker computes the same schedule, so every worker joins every gather.
        if ckpt_due or self.meeting.due(self.step):
            self._sync(save=ckpt_due)

    # ---- validation and the epoch end ---------------------------------------------------------
    def on_test_begin(self, logs=None):
        if self.active and self.in_fit:   # fit's validation: keep the training state it resets
            self.train_state = self._local_state()
            self.t_val = time.monotonic()

    def on_test_end(self, logs=None):
        if self.active and self.in_fit:   # each worker's own validation state (DESIGN.md)
            self.val_state = self._local_state()
            if self.ctx.is_chief and getattr(self, "t_val", None) is not None:
                reporting.BLOCKED.add("validation", time.monotonic() - self.t_val)   # goodput's

    def on_epoch_end(self, epoch, logs=None):
        if not self.active:
            return
        ckpt_due = self.checkpoint_every > 0 and self.step % self.checkpoint_every == 0
        self._sync(save=self.save_at_epoch_end or ckpt_due, train=self.train_state,
                   val=self.val_state, logs=logs, now=getattr(self, "t_batch", None))
        self.train_state = self.val_state = None
        # The next window's clock starts now: validation, this gather and the epoch-end save
        # are not training steps (step_time is seconds per training step).
        self.meeting.t_sync = time.time()

    # ---- the sync point -----------------------------------------------------------------------
    def _columns(self):
        """The row's columns, from the compiled metrics (built by the first step)."""
        if self.cols is None:
            self.mean, self.global_only, left = keras_metrics.choose(
                keras_metrics.flat_metrics(self.model))
            self.cols = rows.meeting_layout(tuple(self.mean))
            if left and self.ctx.is_chief:
                print(f"[{self.ctx.task}] tfconsole: not shown: {', '.join(left)}", flush=True)
        return self.cols

    def _local_state(self) -> dict:
        self._columns()
        return keras_metrics.local_state(self.strategy, self.mean)

    def _sync(self, *, save: bool, train: dict | None = None, val: dict | None = None,
              logs=None, now: float | None = None) -> None:
        cols = self._columns()
        train = self._local_state() if train is None else train
        window, self.mark = keras_metrics.delta(train, self.mark), train
        met = self.meeting.meet(cols, self.step, train=window, val=val, now=now)
        values = self._values(met.rows, logs, repeat=met.again)
        if self.ctx.is_chief:
            reporting.report(self.step, epoch=self.epoch, losses=values["losses"],
                             step_time=values["times"], examples_per_sec=values["eps"],
                             metrics=values["metrics"], global_metrics=values["global"])
        if met.first and self.ctx.is_chief:
            self._write_model_config(keras_module())   # after a step: the model is built
        self.health.check(self.step, met.rows)   # after the line: the NaN shows on the chart too
        if (save or met.save_now) and self.saved_at != self.step:
            self._save(values, save_now=met.save_now, preempting=met.preempting)

    def _values(self, rows: list, logs, *, repeat: bool) -> dict:
        """The line's values from the rows: each worker's own and the global ones."""
        km = keras_metrics
        if not (repeat and self.last):   # else this step's training values went out already
            self.last = self._train_values(rows)
        out = self.last
        val_mine = km.per_worker(rows, self.ctx.tasks, km.VAL)
        glob = {**out["global"], **km.global_values(rows, km.VAL)}
        if logs is not None:
            glob.update(km.from_logs(logs, self.global_only))
        rate = km.learning_rate(getattr(self.model, "optimizer", None))
        if rate is not None:
            glob[metric_line.LEARNING_RATE] = rate
        return {**out, "global": glob,
                "metrics": {t: {**m, **val_mine.get(t, {})} for t, m in out["metrics"].items()}}

    def _train_values(self, rows: list) -> dict:
        out = sync.values(rows, self.ctx.tasks)
        per_worker_batch = self.batch_size / len(rows) if self.batch_size else None
        return {**out, "eps": {t: per_worker_batch / s if per_worker_batch and s > 0 else None
                               for t, s in out["times"].items()}}

    def _save(self, values: dict, *, save_now: bool, preempting: bool) -> None:
        t_save = time.monotonic()
        path = checkpoints.save(self.ckpt, self._assign_step(), epoch=self.epoch,
                                losses=values["losses"], keep=self.keep, versions=self.versions,
                                metrics=values["global"], **self.best)
        if self.ctx.is_chief:   # on the next line: goodput's checkpoint saves
            reporting.BLOCKED.add("save", time.monotonic() - t_save)
        self.saved_at = self.step
        print(f"[{self.ctx.task}] tfconsole: saved checkpoint {path}"
              f"{' (save-now request)' if save_now else ''}", flush=True)
        if save_now:
            reporting.saved(self.step)
        if preempting:
            self.save_on_signal.saved(self.step)
            self.model.stop_training = True
            if self.save_on_signal.exit_on_preempt:
                # Exit at this sync point: after a stop_training break tf_keras still runs the
                # epoch's validation before fit returns (a pruned trial ran 41 s on, past its
                # 30 s save window). Every worker saved this step and none meets again.
                self._end()

    def _assign_step(self) -> int:
        self.step_var.assign(self.step)
        return self.step

    # ---- end ----------------------------------------------------------------------------------
    def on_train_end(self, logs=None):
        if self.active:
            self._end()

    def _end(self) -> None:
        _LAST_FIT["end"] = (self.step, self.epoch)
        self.in_fit = False
        if getattr(self, "meeting", None) is not None:
            self.meeting.profiler.close(self.step)
        if getattr(self, "resumed_epoch", False):
            self.model._initial_epoch = None   # a later fit() of the same model starts at 0
        reporting.close()
        on_signal = getattr(self, "save_on_signal", None)
        if on_signal is not None:
            on_signal.end()   # gives the signals back; after a preemption, exits 75


_classes: dict = {}


def Callback(**options):
    """The callback for ``model.fit``, a subclass of the script's own Keras' Callback.

    Options: ``every`` (gather and report exactly every K steps; default: every 10 steps, but
    no more often than every 0.25 s, which keeps the cost low at fast steps), ``checkpoint_every``
    (also save every N steps; default 0: epoch ends and Save now only), ``keep_checkpoints``
    (retention keeps the last N, default 5), ``batch_size`` (global batch, for examples/s),
    ``preempt_grace_s`` (signal to saved, default 25 s), ``exit_on_preempt`` (default True: exit
    75 once the signal's step is saved; False: fit only stops), ``keep_best`` (also keep the N
    best checkpoints, default 0) by ``best_metric`` (a global value in the checkpoint's
    metadata: "loss", "val_loss", "val_accuracy" ...; epoch-end checkpoints carry the val_*
    ones) and ``best_mode`` ("min", the default, or "max").

    Metrics: every compiled metric with a mean state (total and count: loss, accuracy, MAE ...)
    per worker and global, for training and validation; metrics without one (AUC, Precision,
    Recall ...) are global-only, from the epoch-end logs, once per epoch; the learning rate as
    the global metric "learning_rate" on every line (docs/job-contract.md, "Metrics").
    """
    kmod = keras_module()
    cls = _classes.get(kmod.__name__)
    if cls is None:
        cls = _classes[kmod.__name__] = type("Callback", (_Hooks, kmod.callbacks.Callback),
                                             {"__module__": __name__, "__doc__": Callback.__doc__})
    return cls(**options)
