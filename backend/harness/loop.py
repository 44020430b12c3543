"""The distributed pieces of the training loop: cluster identity, strategy, step and sync.

Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585), so the
harness runs its own loop: ``strategy.run`` + ``tf.nn.compute_average_loss`` in a tf.function.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import tensorflow as tf

import layout
import step_probe

# Columns of the row every replica contributes at a sync step (gathered or all-reduced).
COLS = ("task_index", "loss", "step_time", "examples_per_sec", "save_flag", "input_wait",
        "first_batch")


@dataclass(frozen=True)
class Cluster:
    task: str            # this task's name, e.g. "worker-1"
    tasks: tuple         # every task's name, chief first
    is_chief: bool

    @property
    def task_index(self) -> int:
        return self.tasks.index(self.task)


def cluster_from_env(environ=os.environ) -> Cluster:
    """Read TF_CONFIG; no TF_CONFIG means a single worker called ``worker-0``."""
    cfg = json.loads(environ.get("TF_CONFIG") or "{}")
    spec = cfg.get("cluster") or {}
    task = cfg.get("task") or {"type": "worker", "index": 0}
    role, index = task["type"], int(task.get("index", 0))
    if role not in ("chief", "worker"):
        raise ValueError(f"TF_CONFIG task type {role!r}: the harness runs chief and worker tasks")
    tasks = tuple(layout.task_name(r, i) for r in ("chief", "worker")
                  for i in range(len(spec.get(r, [])))) or ("worker-0",)
    # Without a chief entry, worker 0 is the chief (MultiWorkerMirroredStrategy's rule).
    is_chief = role == "chief" or (role == "worker" and index == 0 and not spec.get("chief"))
    return Cluster(task=layout.task_name(role, index), tasks=tasks, is_chief=is_chief)


def make_strategy():
    """NCCL when this host sees a GPU, AUTO (ring) on CPU. No collective timeout here: TensorFlow
    keeps a thread per collective for it, so the harness bounds each step itself (deadline.py)."""
    impl = tf.distribute.experimental.CommunicationImplementation
    kind = impl.NCCL if tf.config.list_physical_devices("GPU") else impl.AUTO
    options = tf.distribute.experimental.CommunicationOptions(implementation=kind)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def ensure_built(model, element_spec) -> None:
    """Create the variables now (inside the strategy scope) if build_model left them lazy."""
    if model.built and model.weights:
        return
    features = element_spec[0]
    dummy = tf.nest.map_structure(
        lambda s: tf.zeros([1 if d is None else d for d in s.shape], s.dtype), features)
    model(dummy, training=False)


def make_train_step(strategy, model, optimizer, loss_fn, global_batch_size: int,
                    wait_total=None):
    """Two tf.functions over the same step: ``train_step(iterator)`` returns this worker's
    per-replica mean loss; ``train_step_sync(iterator, row)`` also returns every replica's
    metrics row, carried by the step's own gradient all-reduce where the optimizer allows it
    (step_probe.can_fold), else by an all_gather in the same graph call (measured in
    bench/harness.md). ``wait_total``: a step_probe.wait_counter() that sums the seconds spent
    in ``next(iterator)``; None (the bare loop) times nothing.
    """
    fold = step_probe.can_fold(optimizer)
    replicas = strategy.num_replicas_in_sync

    def forward_backward(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            per_example = tf.reshape(loss_fn(labels, predictions), [-1])
            # Divide by the GLOBAL batch: the optimizer's all-reduce sums replicas' gradients.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        return tf.reduce_mean(per_example), tape.gradient(loss, model.trainable_variables)

    def replica_step(batch):
        local, grads = forward_backward(batch)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return local

    def replica_step_sync(batch, row):
        # row = [task_index, sum and count of this worker's losses since the last sync,
        #        step_time, examples_per_sec, save_flag, input_wait, hash_first_batch];
        # this step's loss joins the mean here.
        local, grads = forward_backward(batch)
        mean_loss = (row[1] + local) / (row[2] + 1.0)
        out = tf.stack([row[0], mean_loss, row[3], row[4], row[5], row[6],
                        step_probe.maybe_fingerprint(row[7], batch)])
        ctx = tf.distribute.get_replica_context()
        pairs = [(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None]
        if not fold:
            optimizer.apply_gradients(pairs)
            # all_reduce of a tensor passed in from outside failed ("destinations can not be
            # empty", docs/facts.md #3); all_gather in the replica context works.
            return ctx.all_gather(tf.reshape(out, [1, len(COLS)]), axis=0)
        # One all-reduce for the gradients and the rows (step_probe's docstring); the optimizer
        # is told, while this is traced, that its gradients are summed already.
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                [g for g, _ in pairs] + [step_probe.own_row_matrix(out, replicas)])
        optimizer.apply_gradients(zip(summed[:-1], [v for _, v in pairs]))
        return summed[-1]

    @tf.function
    def train_step(iterator):
        return strategy.run(replica_step, args=(step_probe.timed_next(iterator, wait_total),))

    @tf.function
    def train_step_sync(iterator, row):
        batch = step_probe.timed_next(iterator, wait_total)
        with step_probe.presummed(optimizer, fold):
            return strategy.run(replica_step_sync, args=(batch, row))

    return train_step, train_step_sync


def loss_sum(strategy, outputs: list) -> tuple[float, int]:
    """Sum and count of this worker's step losses since the last sync (replicas averaged).
    Read only at sync points, not every step: on a GPU each read is a host sync."""
    total = 0.0
    for out in outputs:
        values = [float(v) for v in strategy.experimental_local_results(out)]
        total += sum(values) / len(values)
    return total, len(outputs)


def step_and_gather(strategy, step_fn, iterator, row: list) -> list[dict]:
    """Run one step with the sync collective; return one dict per replica in the cluster."""
    gathered = step_fn(iterator, tf.constant(row, dtype=tf.float32))
    matrix = strategy.experimental_local_results(gathered)[0].numpy()
    return [dict(zip(COLS, map(float, r))) for r in matrix]


def per_task(rows: list[dict], tasks: tuple) -> dict:
    """Fold replica rows into one entry per task (a worker with several GPUs has several)."""
    folded: dict = {}
    for r in rows:
        folded.setdefault(tasks[int(r["task_index"])], []).append(r)
    out = {}
    for task, items in folded.items():
        n = len(items)
        out[task] = {
            "loss": sum(i["loss"] for i in items) / n,
            "step_time": max(i["step_time"] for i in items),
            "examples_per_sec": sum(i["examples_per_sec"] for i in items) / n,
            "input_wait": max(i.get("input_wait", float("nan")) for i in items),
            "first_batch": [i.get("first_batch", step_probe.NO_FP) for i in items],
        }
    out["_save"] = any(r["save_flag"] > 0 for r in rows)
    # A worker that got a preemption signal raises the flag to preempt.FLAG (2): save and exit.
    out["_preempt"] = any(r["save_flag"] >= 2 for r in rows)
    return out
