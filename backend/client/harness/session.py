"""One training session of one worker: set up, train, sync, save. Used by train.py."""
from __future__ import annotations

import math
import os
import time

import keras
import tensorflow as tf

from . import (chief_writer, ckpt, ckpt_index, deadline, jobs, layout, loop, metric_line, nonfinite,
               preempt, profiling, report, requests_dir, retention, rows, startup, step_probe, train_info,
               validation)


class Session:
    def __init__(self, args, job, params, cluster):
        self.args, self.job, self.p, self.cluster = args, job, params, cluster
        self.run_dir = os.path.abspath(args.run_dir)
        self.task = cluster.task
        self.bare = bool(params["bare"])
        self.spe = int(params["steps_per_epoch"])
        self.total = int(params["epochs"]) * self.spe
        self.gbs = int(params["global_batch_size"])
        self.pace = float(params["pace_s"])
        self.since_sync: list = []     # each plain step's per-replica state (rows.py)
        self.preempted: int | None = None   # the step saved on a preemption signal
        self.versions = nonfinite.write_versions(self.run_dir, self.task)
        self.health = nonfinite.Watch(self.run_dir, is_chief=cluster.is_chief, stop=bool(params["stop_on_nan"]))
        self.profiler = profiling.Profiler(self.run_dir, self.task, cluster.is_chief)

    # ---- set up -----------------------------------------------------------------------------
    def _setup(self):
        p = self.p
        # Same seed on every worker and in a one-worker run: identical initial weights.
        keras.utils.set_random_seed(int(p["seed"]))
        with startup.bounded(self.task, float(p["startup_timeout_s"])):
            self.strategy = loop.make_strategy()
        # The strategy's own SIGTERM handler only logs (docs/facts.md #10): take the signals back.
        preempt.WATCH.install()
        n = self.strategy.num_replicas_in_sync
        if self.gbs % n:
            raise ValueError(f"global_batch_size {self.gbs} is not divisible by {n} replicas")
        with self.strategy.scope():
            self.model = self.job.build_model()
            self.optimizer = self.job.make_optimizer()
            scale = loop.lr_scale()
            base_lr = loop.base_learning_rate(self.optimizer, scale)
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.ckpt = ckpt.Checkpointer(
            ckpt.checkpoint_dir(self.run_dir, self.task, self.cluster.is_chief),
            self.model, self.optimizer, self.step_var, retention.Policy(
                keep_last=int(p["keep_checkpoints"]), keep_best=int(p["keep_best_checkpoints"]),
                grace_s=float(p["checkpoint_grace_s"]), best_metric=str(p["keep_best_metric"]),
                best_mode=str(p["keep_best_mode"])))
        self.start = self._resume_step()
        self.iterator = iter(self._dataset(self.start))
        with self.strategy.scope():
            loop.ensure_built(self.model, self.iterator.element_spec)
            # Build the optimizer's slots now so a restore fills them instead of deferring.
            self.optimizer.build(self.model.trainable_variables)
            self._setup_metrics()
        if self.start:
            self.ckpt.restore(self.start)
            print(f"[{self.task}] restored step {self.start} from {self.ckpt.directory}",
                  flush=True)
            # Read by the console's restore: which step each worker really resumed from.
            os.makedirs(os.path.join(self.run_dir, layout.TASKS), exist_ok=True)
            ckpt_index.write_json_atomic(layout.task_file(self.run_dir, self.task, "resumed"), {
                "attempt": self.args.attempt, "step": self.start, "time": time.time()})
        # After the restore, which brings back the learning rate the checkpoint was saved with.
        scaled = loop.scale_learning_rate(self.optimizer, base_lr, scale)
        if scaled:
            print(f"[{self.task}] {scaled}", flush=True)
        # The bare loop (bench/harness_overhead.py) times nothing: it is the yardstick.
        self.wait_total = None if self.bare else step_probe.wait_counter()
        self.waited_s = 0.0
        self.train_step, self.train_step_sync = loop.make_train_step(
            self.strategy, self.model, self.optimizer, self.job.loss_fn, self.gbs, self.layout,
            metrics_fn=self.metrics_fn, wait_total=self.wait_total)

    def _setup_metrics(self):
        """The job's metric names (metrics_fn, called once), the row they ride in, validation,
        and a check that keep_best_metric names one of them."""
        self.metrics_fn = getattr(self.job, "metrics_fn", None)
        names = loop.metric_names(self.metrics_fn, self.model, self.iterator.element_spec)
        has_val = callable(getattr(self.job, "make_val_dataset", None))
        problems = rows.name_problems(names, validation=has_val)
        if problems:
            raise jobs.JobError(f"metrics_fn: {'; '.join(problems)}; rename or drop them")
        self.layout = rows.sync_layout(names)
        self.has_lr = loop.learning_rate_reader(self.optimizer) is not None
        self.validator = None if self.bare or not has_val else validation.Validator(
            self.strategy, self.model, self.job, names, seed=int(self.p["seed"]),
            per_replica=self.gbs // self.strategy.num_replicas_in_sync,
            steps=int(self.p["val_steps"]))
        known = [rows.LOSS, *names] + ([rows.VAL_PREFIX + n for n in (rows.LOSS, *names)]
                                       if has_val else [])
        known += [metric_line.LEARNING_RATE] if self.has_lr else []
        best = self.p["keep_best_metric"]
        if int(self.p["keep_best_checkpoints"]) > 0 and best not in known:
            raise jobs.JobError(f"keep_best_metric {best!r} is not a metric of this job; it has "
                                f"{', '.join(known)}")

    def _resume_step(self) -> int:
        if self.args.resume_step is not None:
            return int(self.args.resume_step)
        if self.args.resume_latest:
            latest = self.ckpt.latest_step()
            if latest is None:
                raise ckpt.CheckpointError(
                    f"--resume-latest: {ckpt.describe_available(self.ckpt.directory)}")
            return latest
        return 0

    def _dataset(self, start: int):
        per_replica = self.gbs // self.strategy.num_replicas_in_sync
        seed = int(self.p["seed"])
        skip = self.p["resume_data"] == "skip"

        def fn(ctx):
            ds = self.job.make_dataset(ctx, per_replica, seed if skip else seed + start)
            # "skip" replays the stream to where the run stopped: a resumed run sees the same
            # batches as an uninterrupted one. Costs one pass over `start` batches.
            ds = ds.skip(start) if (skip and start) else ds
            return step_probe.endless(ds, self.total - start, ctx)

        return self.strategy.distribute_datasets_from_function(fn)

    def _write_train_json(self):
        train_info.write(self.run_dir, source="harness", run_id=self.args.run_id,
                         attempt=self.args.attempt, total_steps=self.total, steps_per_epoch=self.spe,
                         epochs=int(self.p["epochs"]), start_step=self.start, tasks=self.cluster.tasks,
                         params=self.p, versions=self.versions, global_batch_size=self.gbs)

    def _open_writers(self):
        self.writer = chief_writer.ChiefWriter(self.run_dir, self.args.run_id, self.args.attempt)

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        self._setup()
        chief_writes = self.cluster.is_chief and not self.bare
        if chief_writes:
            self._write_train_json()
            self._open_writers()
        t0 = self.t_sync = time.time()
        self.sync_step = self.start
        t_clock, clock_step = None, self.start
        # Armed once the first step is done: tracing and a resume's replay of the data come first.
        bound = deadline.StepDeadline(float(self.p["collective_timeout_s"]))
        try:
            for step in range(self.start + 1, self.total + 1):
                if self._is_sync(step) and not self.bare:
                    self._sync_point(step)
                    if self.preempted is not None:
                        break   # every worker saw the same flag, saved this step: exit together
                else:
                    out = self.train_step(self.iterator)
                    if not self.bare:
                        self.since_sync.append(out)
                bound.step_done()
                self.profiler.tick(step)
                if self.pace:
                    time.sleep(self.pace)
                if t_clock is None and self._scheduled(step):
                    # Both step functions are traced by now: steps/s excludes compile time, the
                    # same way with and without instrumentation (bench/harness_overhead.py).
                    t_clock, clock_step, cpu_clock = time.time(), step, time.process_time()
            if self.bare and self.total > self.start:  # the last step must finish before the clock
                loop.window_state(self.strategy, [out], len(self.layout.state_cols))
        finally:
            bound.close()
            self.profiler.close(step if self.total > self.start else self.start)
        if self.cluster.is_chief and not self.bare and self.preempted is None and self.total > self.start:
            # A save-now request that came after the last sync point: the last step's checkpoint
            # (always saved, _save_due) holds the weights it asked for, so it answers it.
            requests_dir.mark_done(requests_dir.pending(self.run_dir), self.total)
        elapsed = time.time() - (t_clock or t0)
        timed = self.total - clock_step
        # CPU seconds of this process per step: robust where other jobs share the cores.
        cpu = (time.process_time() - cpu_clock) / timed if t_clock and timed else None
        if chief_writes:
            self.writer.close()
        last = self.preempted if self.preempted is not None else self.total
        return {"task": self.task, "steps": last - self.start, "last_step": last,
                "preempted": self.preempted,
                "seconds": round(time.time() - t0, 3),
                "steps_per_sec": round(timed / elapsed, 3) if elapsed > 0 and timed else None,
                "cpu_ms_per_step": round(cpu * 1000, 3) if cpu else None, "bare": self.bare}

    def _epoch(self, step: int) -> int:
        return (step - 1) // self.spe + 1

    def _save_due(self, step: int) -> bool:
        every = int(self.p["checkpoint_every"])
        return step % self.spe == 0 or (every > 0 and step % every == 0) or step == self.total

    def _val_due(self, step: int) -> bool:
        return bool(self.validator) and step % validation.every(self.p, self.spe) == 0

    def _scheduled(self, step: int) -> bool:
        return step % int(self.p["log_every"]) == 0 or self._save_due(step) or self._val_due(step)

    def _is_sync(self, step: int) -> bool:
        # Every worker computes the same schedule, so every worker joins every collective. The
        # first step of an attempt is a sync point too: its loss reaches the console before the
        # plain step function is even traced (first curves sooner; bench/first_curves.py).
        return step == self.start + 1 or self._scheduled(step)

    # ---- the sync point: gather, validate, report, save ---------------------------------------
    def _sync_point(self, step: int) -> None:
        """One step that also gathers every worker's row; then validate, report, maybe save."""
        head = self._window(step)
        pending, head["save_flag"] = self._requests()
        head["profile_steps"] = self.profiler.flag()
        gathered = rows.fold(
            loop.gather_rows(self.strategy, self.train_step_sync, self.iterator, self.layout, head),
            self.cluster.tasks, self.layout)
        self.profiler.begin(step, [r["profile_steps"] for rs in gathered.rows.values() for r in rs],
                            first=step <= self.start + 1)
        # A worker that got a preemption signal raises the flag to preempt.FLAG (2): save and
        # exit. Every worker sees the same flags, so all skip the validation alike.
        save_now, preempting = preempt.decide(r["save_flag"] for rs in gathered.rows.values() for r in rs)
        t_val = time.monotonic()
        val = (self.validator.run(self.cluster.task_index, self.cluster.tasks)
               if self._val_due(step) and not preempting else None)
        if val is not None and self.cluster.is_chief:   # goodput's validation (docs/goodput.md)
            report.BLOCKED.add("validation", time.monotonic() - t_val)
        per_task, glob = self._named(gathered, val)
        self._report(step, gathered, per_task, glob, first=bool(head["first_batch"]),
                     validated=val is not None)
        if preempting:
            preempt.WATCH.peer_flag()
        if self._save_due(step) or save_now:
            self._save(step, per_task, glob, pending, preempting=preempting, save_now=save_now)

    def _window(self, step: int) -> dict:
        """This worker's row going into the sync step: its state since the last sync point
        (rows.py), its timings over that window, and whether to hash this batch."""
        state = loop.window_state(self.strategy, self.since_sync, len(self.layout.state_cols))
        self.since_sync = []
        now = time.time()
        # Wall time per step since the previous sync point, everything included (that sync
        # step, metrics writing, checkpoint saves): the throughput the user actually gets.
        done = step - 1 - self.sync_step          # steps run since t_sync
        if done:
            step_time = (now - self.t_sync) / done
            eps = (self.gbs / len(self.cluster.tasks)) / step_time if step_time > 0 else 0.0
        else:   # an attempt's first step: no step has run yet to time (written as null)
            step_time = eps = math.nan
        wait = self._input_wait(now - self.t_sync if done else 0.0)
        self.t_sync, self.sync_step = now, step - 1
        return {"task_index": self.cluster.task_index, "step_time": step_time,
                "examples_per_sec": eps, "input_wait": wait,
                "first_batch": 1.0 if step == self.start + 1 else 0.0,   # hash the first batch
                **loop.state_values(self.layout, state)}

    def _requests(self) -> tuple[list, float]:
        """The chief's pending save requests and the flag this worker raises in the row."""
        pending = requests_dir.pending(self.run_dir) if self.cluster.is_chief else []
        return pending, preempt.save_flag(preempt.WATCH, pending)

    def _named(self, gathered: rows.Folded, val: rows.Folded | None) -> tuple[dict, dict]:
        """Every metric by name: ``{task: {name: value}}`` and the global ``{name: value}``
        (the loss, the job's metrics, the learning rate, and a validation's val_ values)."""
        per_task = {t: {**v, **(val.values.get(t, {}) if val else {})}
                    for t, v in gathered.values.items()}
        glob = dict(gathered.global_)
        if self.has_lr:   # every replica read the same optimizer value
            lr = next(iter(gathered.rows.values()))[0]["learning_rate"]
            glob[metric_line.LEARNING_RATE] = float(f"{lr:.7g}")   # float32's digits: 0.01, not 0.0099999998
        if val:
            glob.update(val.global_)
        return per_task, glob

    def _report(self, step, gathered, per_task, glob, *, first: bool, validated: bool) -> None:
        epoch, mine = self._epoch(step), per_task[self.task]
        step_time = gathered.figure(self.task, "step_time")
        timing = (f"{step_time * 1000:.1f} ms/step "
                  f"{gathered.figure(self.task, 'examples_per_sec', rows.mean):.0f} ex/s"
                  if math.isfinite(step_time) else "(first step)")
        print(f"[{self.task}] step {step}/{self.total} epoch {epoch} loss {mine['loss']:.5f} "
              f"global_loss {glob['loss']:.5f} {timing}", flush=True)
        if validated:
            shown = " ".join(f"{k} {v:.5f} (global {glob[k]:.5f})" for k, v in mine.items()
                             if k.startswith(rows.VAL_PREFIX))
            print(f"[{self.task}] validation at step {step}: {shown}", flush=True)
        if first:
            self._check_same_data(step, {t: [r["first_batch"] for r in rs]
                                         for t, rs in gathered.rows.items()})
        if self.cluster.is_chief:
            tasks = [t for t in self.cluster.tasks if t in gathered.rows]
            self.writer.write(step, epoch, tasks, per_task, glob, {t: {
                "step_time": gathered.figure(t, "step_time"),
                "examples_per_sec": gathered.figure(t, "examples_per_sec", rows.mean),
                "input_wait": gathered.figure(t, "input_wait"),
                "first_batch": _first_hash([r["first_batch"] for r in gathered.rows[t]])} for t in tasks})
        # Every value is checked; those only global (the learning rate) under "global".
        only_global = {k: v for k, v in glob.items() if k not in mine}
        self.health.check(step, {**per_task, "global": only_global}, self.versions)

    def _save(self, step, per_task, glob, pending, *, preempting: bool, save_now: bool) -> None:
        losses = {t: v[rows.LOSS] for t, v in per_task.items()}
        t_save = time.monotonic()
        path = self.ckpt.save(step, self._epoch(step), losses, glob)
        why = " (preemption)" if preempting else " (save-now request)" if save_now else ""
        print(f"[{self.task}] saved checkpoint {path}{why}", flush=True)
        if self.cluster.is_chief:   # on the next line: goodput's checkpoint saves
            report.BLOCKED.add("save", time.monotonic() - t_save)
        if self.cluster.is_chief and save_now:
            requests_dir.mark_done(pending, step)
        if preempting:
            preempt.WATCH.saved(step, time.monotonic() - t_save)
            self.preempted = step

    # ---- what the sync point learns besides the loss (step_probe) ----------------------------
    def _input_wait(self, window_s: float) -> float:
        """Share of the window since the last sync point this worker spent in next(iterator).
        One read of a host variable per sync point, none per step."""
        total = float(self.wait_total.numpy())
        waited, self.waited_s = total - self.waited_s, total
        return step_probe.wait_share(waited, window_s)

    def _check_same_data(self, step: int, hashes: dict) -> None:
        """Every worker sees every first-batch hash: each says so in its log, and the chief
        writes data_check.json for ``status`` (Monitor reads the hashes from the metrics)."""
        groups = step_probe.same_data_groups(hashes)
        path = os.path.join(self.run_dir, step_probe.DATA_CHECK)
        if not groups:
            if self.cluster.is_chief and os.path.exists(path):
                os.remove(path)   # an earlier attempt's finding; this attempt's data differs
            return
        names = "; ".join(", ".join(g) for g in groups)
        print(f"[{self.task}] SAME DATA: the first batches of {names} are identical: shard the "
              "dataset by input_context (ctx.shard / input_pipeline_id) or set "
              "options.experimental_distribute.auto_shard_policy", flush=True)
        if self.cluster.is_chief:
            ckpt_index.write_json_atomic(path, {
                "attempt": self.args.attempt, "step": step, "same_data": groups,
                "time": time.time()})


def _first_hash(values: list) -> float | None:
    """The first replica's batch hash for the metrics line; None where none was taken."""
    taken = [v for v in values if v != step_probe.NO_FP]
    return taken[0] if taken else None
