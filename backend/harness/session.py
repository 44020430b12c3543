"""One training session of one worker: set up, train, sync, save. Used by train.py."""
from __future__ import annotations

import math
import os
import time

import keras
import tensorflow as tf

import ckpt
import ckpt_index
import deadline
import nonfinite
import layout
import loop
import preempt
import report
import requests_dir
import retention
import startup
import step_probe
import tb


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
        self.losses_since_sync: list = []
        self.preempted: int | None = None   # the step saved on a preemption signal
        self.versions = nonfinite.write_versions(self.run_dir, self.task)
        self.health = nonfinite.Watch(self.run_dir, is_chief=cluster.is_chief, stop=bool(params["stop_on_nan"]))

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
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.ckpt = ckpt.Checkpointer(
            ckpt.checkpoint_dir(self.run_dir, self.task, self.cluster.is_chief),
            self.model, self.optimizer, self.step_var, retention.Policy(
                keep_last=int(p["keep_checkpoints"]), keep_best=int(p["keep_best_checkpoints"]),
                grace_s=float(p["checkpoint_grace_s"])))
        self.start = self._resume_step()
        self.iterator = iter(self._dataset(self.start))
        with self.strategy.scope():
            loop.ensure_built(self.model, self.iterator.element_spec)
            # Build the optimizer's slots now so a restore fills them instead of deferring.
            self.optimizer.build(self.model.trainable_variables)
        if self.start:
            self.ckpt.restore(self.start)
            print(f"[{self.task}] restored step {self.start} from {self.ckpt.directory}",
                  flush=True)
            # Read by the console's restore: which step each worker really resumed from.
            os.makedirs(os.path.join(self.run_dir, layout.TASKS), exist_ok=True)
            ckpt_index.write_json_atomic(layout.task_file(self.run_dir, self.task, "resumed"), {
                "attempt": self.args.attempt, "step": self.start, "time": time.time()})
        # The bare loop (bench/harness_overhead.py) times nothing: it is the yardstick.
        self.wait_total = None if self.bare else step_probe.wait_counter()
        self.waited_s = 0.0
        self.train_step, self.train_step_sync = loop.make_train_step(
            self.strategy, self.model, self.optimizer, self.job.loss_fn, self.gbs,
            wait_total=self.wait_total)

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
        info = {
            "run_id": self.args.run_id, "attempt": self.args.attempt,
            "total_steps": self.total, "steps_per_epoch": self.spe,
            "epochs": int(self.p["epochs"]), "global_batch_size": self.gbs,
            "start_step": self.start, "num_workers": len(self.cluster.tasks),
            "tasks": list(self.cluster.tasks), "params": self.p, "time": time.time(),
            "versions": self.versions,
        }
        ckpt_index.write_json_atomic(os.path.join(self.run_dir, "train.json"), info)

    def _open_writers(self):
        self.reporter = report.MetricsReporter(self.run_dir, self.args.run_id, self.args.attempt)
        tags = ["loss/global"] + [f"{k}/{t}" for t in self.cluster.tasks
                                  for k in ("loss", "step_time")]
        self.tb = tb.ScalarWriter(os.path.join(self.run_dir, layout.TENSORBOARD), tags)

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
                        self.losses_since_sync.append(out)
                bound.step_done()
                if self.pace:
                    time.sleep(self.pace)
                if t_clock is None and self._scheduled(step):
                    # Both step functions are traced by now: steps/s excludes compile time, the
                    # same way with and without instrumentation (bench/harness_overhead.py).
                    t_clock, clock_step, cpu_clock = time.time(), step, time.process_time()
            if self.bare and self.total > self.start:  # the last step must finish before the clock
                loop.loss_sum(self.strategy, [out])
        finally:
            bound.close()
        if self.cluster.is_chief and not self.bare and self.preempted is None and self.total > self.start:
            # A save-now request that came after the last sync point: the last step's checkpoint
            # (always saved, _save_due) holds the weights it asked for, so it answers it.
            requests_dir.mark_done(requests_dir.pending(self.run_dir), self.total)
        elapsed = time.time() - (t_clock or t0)
        timed = self.total - clock_step
        # CPU seconds of this process per step: robust where other jobs share the cores.
        cpu = (time.process_time() - cpu_clock) / timed if t_clock and timed else None
        if chief_writes:
            self.reporter.close()
            self.tb.close()
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

    def _scheduled(self, step: int) -> bool:
        return step % int(self.p["log_every"]) == 0 or self._save_due(step)

    def _is_sync(self, step: int) -> bool:
        # Every worker computes the same schedule, so every worker joins every collective. The
        # first step of an attempt is a sync point too: its loss reaches the console before the
        # plain step function is even traced (first curves sooner; bench/first_curves.py).
        return step == self.start + 1 or self._scheduled(step)

    def _sync_point(self, step: int) -> None:
        """One step that also gathers every worker's metrics row; then log and maybe save."""
        prev_sum, prev_n = loop.loss_sum(self.strategy, self.losses_since_sync)
        self.losses_since_sync = []
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
        pending = requests_dir.pending(self.run_dir) if self.cluster.is_chief else []
        if requests_dir.stop_requested(pending):
            preempt.WATCH.request("stop --save")
        flag = preempt.FLAG if preempt.WATCH.pending else (1.0 if pending else 0.0)
        first = 1.0 if step == self.start + 1 else 0.0   # hash the attempt's first batch
        row = [self.cluster.task_index, prev_sum, prev_n, step_time, eps, flag, wait, first]
        rows = loop.step_and_gather(self.strategy, self.train_step_sync, self.iterator, row)
        folded = loop.per_task(rows, self.cluster.tasks)
        save_now = folded.pop("_save")
        preempting = folded.pop("_preempt")
        global_loss = sum(v["loss"] for v in folded.values()) / len(folded)
        epoch, local = self._epoch(step), folded[self.task]["loss"]
        print(f"[{self.task}] step {step}/{self.total} epoch {epoch} loss {local:.5f} "
              f"global_loss {global_loss:.5f} " + (f"{step_time * 1000:.1f} ms/step {eps:.0f} ex/s"
                                                   if done else "(first step)"),
              flush=True)
        if first:
            self._check_same_data(step, folded)
        if self.cluster.is_chief:
            self._write_metrics(step, epoch, folded, global_loss)
        self.health.check(step, {t: v["loss"] for t, v in folded.items()}, self.versions)
        if preempting:
            preempt.WATCH.peer_flag()
        if self._save_due(step) or save_now:
            losses = {t: v["loss"] for t, v in folded.items()}
            t_save = time.monotonic()
            path = self.ckpt.save(step, epoch, losses, global_loss)
            why = " (preemption)" if preempting else " (save-now request)" if save_now else ""
            print(f"[{self.task}] saved checkpoint {path}{why}", flush=True)
            if self.cluster.is_chief and save_now:
                requests_dir.mark_done(pending, step)
            if preempting:
                preempt.WATCH.saved(step, time.monotonic() - t_save)
                self.preempted = step

    def _write_metrics(self, step, epoch, folded, global_loss):
        now = time.time()
        for task in self.cluster.tasks:
            v = folded.get(task)
            if v:
                self.reporter.log(task, step, epoch, v["loss"], global_loss, v["step_time"],
                                  v["examples_per_sec"], now=now, input_wait=v["input_wait"],
                                  first_batch=_first_hash(v["first_batch"]))
        values = [global_loss]
        for task in self.cluster.tasks:
            v = folded.get(task, {"loss": float("nan"), "step_time": float("nan")})
            values += [v["loss"], v["step_time"]]
        self.tb.write(step, values)

    # ---- what the sync point learns besides the loss (step_probe) ----------------------------
    def _input_wait(self, window_s: float) -> float:
        """Share of the window since the last sync point this worker spent in next(iterator).
        One read of a host variable per sync point, none per step."""
        total = float(self.wait_total.numpy())
        waited, self.waited_s = total - self.waited_s, total
        return step_probe.wait_share(waited, window_s)

    def _check_same_data(self, step: int, folded: dict) -> None:
        """Every worker sees every first-batch hash: each says so in its log, and the chief
        writes data_check.json for ``status`` (Monitor reads the hashes from the metrics)."""
        groups = step_probe.same_data_groups({t: v["first_batch"] for t, v in folded.items()})
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
