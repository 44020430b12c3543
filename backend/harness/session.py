"""One training session of one worker: set up, train, sync, save. Used by train.py."""
from __future__ import annotations

import os
import time

import keras
import tensorflow as tf

import ckpt
import ckpt_index
import layout
import loop
import report
import requests_dir


class Session:
    def __init__(self, args, job, params, cluster):
        self.args, self.job, self.p, self.cluster = args, job, params, cluster
        self.run_dir = os.path.abspath(args.run_dir)
        self.task = cluster.task
        self.bare = bool(params["bare"])
        self.spe = int(params["steps_per_epoch"])
        self.total = int(params["epochs"]) * self.spe
        self.gbs = int(params["global_batch_size"])
        self.losses_since_sync: list = []
        self.last_rows: dict = {}

    # ---- set up -----------------------------------------------------------------------------
    def _setup(self):
        p = self.p
        # Same seed on every worker and in a one-worker run: identical initial weights.
        keras.utils.set_random_seed(int(p["seed"]))
        self.strategy = loop.make_strategy(p["collective_timeout_s"])
        n = self.strategy.num_replicas_in_sync
        if self.gbs % n:
            raise ValueError(f"global_batch_size {self.gbs} is not divisible by {n} replicas")
        with self.strategy.scope():
            self.model = self.job.build_model()
            self.optimizer = self.job.make_optimizer()
            self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.ckpt = ckpt.Checkpointer(
            ckpt.checkpoint_dir(self.run_dir, self.task, self.cluster.is_chief),
            self.model, self.optimizer, self.step_var, int(p["keep_checkpoints"]))
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
        self.train_step = loop.make_train_step(
            self.strategy, self.model, self.optimizer, self.job.loss_fn, self.gbs)
        self.sync = loop.make_sync(self.strategy)

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
            return ds.skip(start) if (skip and start) else ds

        return self.strategy.distribute_datasets_from_function(fn)

    def _write_train_json(self):
        info = {
            "run_id": self.args.run_id, "attempt": self.args.attempt,
            "total_steps": self.total, "steps_per_epoch": self.spe,
            "epochs": int(self.p["epochs"]), "global_batch_size": self.gbs,
            "start_step": self.start, "num_workers": len(self.cluster.tasks),
            "tasks": list(self.cluster.tasks), "params": self.p, "time": time.time(),
        }
        ckpt_index.write_json_atomic(os.path.join(self.run_dir, "train.json"), info)

    def _open_writers(self):
        self.reporter = report.MetricsReporter(self.run_dir, self.args.run_id, self.args.attempt)
        self.tb = tf.summary.create_file_writer(os.path.join(self.run_dir, layout.TENSORBOARD))

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        self._setup()
        chief_writes = self.cluster.is_chief and not self.bare
        if chief_writes:
            self._write_train_json()
            self._open_writers()
        t0 = t_sync = time.time()
        t_first = None
        for step in range(self.start + 1, self.total + 1):
            out = self.train_step(self.iterator)
            if t_first is None:
                t_first = time.time()   # after tracing: steps/s below excludes compile time
            if self.bare:
                continue
            self.losses_since_sync.append(out)
            if self._is_sync(step):
                t_sync = self._sync_point(step, t_sync)
        if self.bare and self.total > self.start:  # the last step must finish before the clock
            loop.local_mean(self.strategy, [out])
        elapsed = time.time() - (t_first or t0)
        timed = max(self.total - self.start - 1, 0)
        if chief_writes:
            self.reporter.close()
            self.tb.close()
        return {"task": self.task, "steps": self.total - self.start, "last_step": self.total,
                "seconds": round(time.time() - t0, 3),
                "steps_per_sec": round(timed / elapsed, 3) if elapsed > 0 and timed else None,
                "bare": self.bare}

    def _epoch(self, step: int) -> int:
        return (step - 1) // self.spe + 1

    def _save_due(self, step: int) -> bool:
        every = int(self.p["checkpoint_every"])
        return step % self.spe == 0 or (every > 0 and step % every == 0) or step == self.total

    def _is_sync(self, step: int) -> bool:
        # Every worker computes the same schedule, so every worker joins every collective.
        return step % int(self.p["log_every"]) == 0 or self._save_due(step)

    def _sync_point(self, step: int, t_prev: float) -> float:
        n_steps = len(self.losses_since_sync)
        local = loop.local_mean(self.strategy, self.losses_since_sync)
        self.losses_since_sync = []
        step_time = (time.time() - t_prev) / max(n_steps, 1)
        eps = (self.gbs / len(self.cluster.tasks)) / step_time if step_time > 0 else 0.0
        pending = requests_dir.pending(self.run_dir) if self.cluster.is_chief else []
        row = [self.cluster.task_index, local, step_time, eps, 1.0 if pending else 0.0]
        folded = loop.per_task(loop.gather_rows(self.strategy, self.sync, row), self.cluster.tasks)
        save_now = folded.pop("_save")
        global_loss = sum(v["loss"] for v in folded.values()) / len(folded)
        epoch = self._epoch(step)
        print(f"[{self.task}] step {step}/{self.total} epoch {epoch} loss {local:.5f} "
              f"global_loss {global_loss:.5f} {step_time * 1000:.1f} ms/step {eps:.0f} ex/s",
              flush=True)
        if self.cluster.is_chief:
            self._write_metrics(step, epoch, folded, global_loss)
        if self._save_due(step) or save_now:
            losses = {t: v["loss"] for t, v in folded.items()}
            path = self.ckpt.save(step, epoch, losses, global_loss)
            print(f"[{self.task}] saved checkpoint {path}"
                  f"{' (save-now request)' if save_now else ''}", flush=True)
            if self.cluster.is_chief and save_now:
                requests_dir.mark_done(pending, step)
        return time.time()

    def _write_metrics(self, step, epoch, folded, global_loss):
        now = time.time()
        for task in self.cluster.tasks:
            v = folded.get(task)
            if v:
                self.reporter.log(task, step, epoch, v["loss"], global_loss, v["step_time"],
                                  v["examples_per_sec"], now=now)
        with self.tb.as_default(step=step):
            tb_scalar("loss/global", global_loss)
            for task, v in folded.items():
                tb_scalar(f"loss/{task}", v["loss"])
                tb_scalar(f"step_time/{task}", v["step_time"])
        self.tb.flush()


def _scalar_metadata() -> bytes:
    # What tensorboard's scalar summary writes, built here because tf.summary.scalar needs the
    # tensorboard package, which worker hosts need not have.
    from tensorflow.core.framework import summary_pb2
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    meta.data_class = summary_pb2.DATA_CLASS_SCALAR
    return meta.SerializeToString()


_SCALAR_META = None


def tb_scalar(tag: str, value: float) -> None:
    global _SCALAR_META
    if _SCALAR_META is None:
        _SCALAR_META = _scalar_metadata()
    tf.summary.write(tag, tf.constant(value, tf.float32), metadata=_SCALAR_META)

