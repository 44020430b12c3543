"""The distributed pieces of the training loop: cluster identity, strategy, step and sync.

Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585), so the
harness runs its own loop: ``strategy.run`` + ``tf.nn.compute_average_loss`` in a tf.function.
"""
from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from . import jobs
from . import rows
from . import step_probe
from . import taskenv
from . import tf_config_doc


def cluster_from_env(environ=os.environ) -> tf_config_doc.Place:
    """This task's place from TF_CONFIG (``tf_config_doc.place``); the harness runs chief and
    worker tasks only."""
    where = tf_config_doc.place(environ.get("TF_CONFIG"))
    if where.role not in tf_config_doc.LISTED_ROLES:
        raise ValueError(f"TF_CONFIG task type {where.role!r}: the harness runs chief and worker tasks")
    return where


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


def _dummy(spec):
    """Zeros shaped like ``spec`` (an unknown dimension: 1): one example, to call a job's code."""
    def zeros(s):
        s = getattr(s, "_value_specs", (s,))[0]   # a PerReplicaSpec (several workers): replica 0's
        return tf.zeros([1 if d is None else d for d in s.shape], s.dtype)

    return tf.nest.map_structure(zeros, spec)


def metric_names(metrics_fn, model, element_spec) -> list[str]:
    """The names ``metrics_fn`` returns, found by calling it once on one zero example, and
    checked: a dict of per-example values under names the harness can carry."""
    if metrics_fn is None:
        return []
    features, labels = element_spec
    got = metrics_fn(_dummy(labels), model(_dummy(features), training=False))
    if not isinstance(got, dict):
        raise jobs.JobError(f"metrics_fn returned {type(got).__name__}: return a dict "
                            "{name: per-example tensor}, e.g. {'accuracy': ...}; see "
                            "docs/job-contract.md")
    for name, value in got.items():
        if len(getattr(value, "shape", ())) < 1:
            raise jobs.JobError(f"metrics_fn value {name!r} is a scalar: return one value per "
                                "example (shape [batch], like loss_fn); the harness averages")
    return list(got)


def _metric_states(metrics_fn, names, labels, predictions) -> list:
    """[total, count] of every metric over this replica's batch, in ``names`` order."""
    if not names:
        return []
    got = metrics_fn(labels, predictions)
    if not isinstance(got, dict) or list(got) != list(names):
        raise jobs.JobError(f"metrics_fn returned {sorted(got) if isinstance(got, dict) else got!r}"
                            f", first {list(names)}: return the same names every call")
    out = []
    for name in names:
        values = tf.cast(tf.reshape(got[name], [-1]), tf.float32)
        out += [tf.reduce_sum(values), tf.cast(tf.size(values), tf.float32)]
    return out


def lr_scale(environ=None) -> float:
    """The factor the console asks the learning rate to be multiplied by (1.0: none)."""
    text = ((os.environ if environ is None else environ).get(taskenv.LR_SCALE) or "").strip()
    return float(text) if text else 1.0


def base_learning_rate(optimizer, scale: float, *, fix: str = "give make_optimizer a number") -> float | None:
    """The job's own learning rate, read before a restore overwrites it with a checkpoint's
    (already scaled, by an earlier shrink); None when there is nothing to scale. Harness jobs,
    ``KerasCallback`` and ``Loop`` alike; ``fix``: what that kind of job changes."""
    if scale == 1.0:
        return None
    rate = getattr(optimizer, "_learning_rate", None)
    if callable(rate) or not hasattr(rate, "assign"):   # a schedule, or an optimizer we cannot set
        raise jobs.JobError(
            f"the run shrank with restart.shrink keep_replica_batch, which multiplies the learning rate "
            f"by {scale:.4g}, but this job's optimizer has no plain learning rate to scale "
            f"({type(rate).__name__}); {fix}, or set restart.shrink: keep_global_batch")
    return float(np.asarray(optimizer.learning_rate))


def scale_learning_rate(optimizer, base: float | None, scale: float) -> str:
    """Set the learning rate to ``base`` x ``scale`` (after any restore); what it did, for the log."""
    if base is None:
        return ""
    optimizer.learning_rate = base * scale
    return f"learning rate {base:.6g} x {scale:.4g} = {float(np.asarray(optimizer.learning_rate)):.6g} (the run shrank)"


def learning_rate_reader(optimizer):
    """A function giving the optimizer's current learning rate (a schedule's value at this
    step) as a float32 tensor, or None for an optimizer that has no readable one."""
    try:
        float(np.asarray(optimizer.learning_rate))
    except Exception:  # noqa: BLE001 - any optimizer: no number, no learning_rate metric
        return None
    return lambda: tf.cast(tf.convert_to_tensor(optimizer.learning_rate), tf.float32)


def make_train_step(strategy, model, optimizer, loss_fn, global_batch_size: int,
                    layout_: rows.Columns, *, metrics_fn=None, wait_total=None):
    """Two tf.functions over the same step: ``train_step(iterator)`` returns this worker's
    per-replica state (``layout_.state_cols``: the step's mean loss and 1, each metric's total
    and count); ``train_step_sync(iterator, row)`` takes the window's row (rows.py) and returns
    every replica's row, carried by the step's own gradient all-reduce where the optimizer
    allows it (step_probe.can_fold), else by an all_gather in the same graph call (measured in
    bench/harness.md). ``wait_total``: a step_probe.wait_counter() that sums the seconds spent
    in ``next(iterator)``; None (the bare loop) times nothing.
    """
    fold = step_probe.can_fold(optimizer)
    replicas = strategy.num_replicas_in_sync
    names = layout_.metrics[1:]
    n_head, width = len(layout_.head), len(layout_.cols)
    lr = learning_rate_reader(optimizer) or (lambda: tf.constant(float("nan")))

    def forward_backward(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            per_example = tf.reshape(loss_fn(labels, predictions), [-1])
            # Divide by the GLOBAL batch: the optimizer's all-reduce sums replicas' gradients.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        state = [tf.cast(tf.reduce_mean(per_example), tf.float32), tf.constant(1.0)]
        state += _metric_states(metrics_fn, names, labels, predictions)
        return tf.stack(state), tape.gradient(loss, model.trainable_variables)

    def replica_step(batch):
        state, grads = forward_backward(batch)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return state

    def replica_step_sync(batch, row):
        # The row's head passes through but for the first batch's hash and the learning rate
        # (read before this step's update: the rate this step used); this step's state joins
        # the window's.
        state, grads = forward_backward(batch)
        head = [row[i] for i in range(n_head)]
        head[layout_.at("first_batch")] = step_probe.maybe_fingerprint(
            row[layout_.at("first_batch")], batch)
        head[layout_.at("learning_rate")] = lr()
        out = tf.concat([tf.stack(head), row[n_head:] + state], axis=0)
        ctx = tf.distribute.get_replica_context()
        pairs = [(g, v) for g, v in zip(grads, model.trainable_variables) if g is not None]
        if not fold:
            optimizer.apply_gradients(pairs)
            # all_reduce of a tensor passed in from outside failed ("destinations can not be
            # empty", docs/facts.md #3); all_gather in the replica context works.
            return ctx.all_gather(tf.reshape(out, [1, width]), axis=0)
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


def make_eval_steps(strategy, model, loss_fn, layout_: rows.Columns, *, metrics_fn=None):
    """Validation: ``eval_step(iterator)`` returns this worker's per-replica state of one
    batch (loss and metrics as total and count of examples); ``eval_step_gather(iterator,
    row)`` adds its batch to the row (rows.py's rule) and gathers every replica's row."""
    names = layout_.metrics[1:]
    n_head, width = len(layout_.head), len(layout_.cols)

    def replica_state(batch):
        features, labels = batch
        predictions = model(features, training=False)
        per_example = tf.cast(tf.reshape(loss_fn(labels, predictions), [-1]), tf.float32)
        return tf.stack([tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32),
                         *_metric_states(metrics_fn, names, labels, predictions)])

    def replica_gather(batch, row):
        out = tf.concat([row[:n_head], row[n_head:] + replica_state(batch)], axis=0)
        ctx = tf.distribute.get_replica_context()
        return ctx.all_gather(tf.reshape(out, [1, width]), axis=0)

    @tf.function
    def eval_step(iterator):
        return strategy.run(replica_state, args=(next(iterator),))

    @tf.function
    def eval_step_gather(iterator, row):
        return strategy.run(replica_gather, args=(next(iterator), row))

    return eval_step, eval_step_gather


def window_state(strategy, outputs: list, width: int) -> np.ndarray:
    """This worker's state over the steps since the last sync: the sum over steps of the
    per-step state, averaged over its replicas (rows.py says why averaged). Read only at sync
    points, not every step: on a GPU each read is a host sync."""
    total = np.zeros(width, dtype=np.float64)
    for out in outputs:
        local = [np.asarray(v, dtype=np.float64) for v in strategy.experimental_local_results(out)]
        total += np.mean(local, axis=0)
    return total


def gather_rows(strategy, step_fn, iterator, layout_: rows.Columns, values: dict) -> list:
    """Run a step that gathers ``layout_`` rows (the row in: ``values`` by column); return
    every replica's row in the cluster."""
    gathered = step_fn(iterator, tf.constant(layout_.vector(values), dtype=tf.float32))
    matrix = strategy.experimental_local_results(gathered)[0].numpy()
    return [layout_.read(r) for r in matrix]


def state_values(layout_: rows.Columns, state) -> dict:
    """``{state column: value}`` from a state vector (``layout_.state_cols`` order)."""
    return dict(zip(layout_.state_cols, (float(v) for v in state)))
