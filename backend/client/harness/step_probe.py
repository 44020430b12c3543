"""What a sync step learns besides the loss, at (almost) no cost to the step.

- Input wait: the seconds each step spends in ``next(iterator)``, summed in the graph into a
  host variable by two ``tf.timestamp`` ops around the fetch. Nothing is read per step (a read
  is a host sync on a GPU); the sync point reads the sum once and divides by the wall time of the
  window: the share of each step this worker waited for its data.
- Same data: at an attempt's first step every replica hashes its batch; the hashes travel in the
  metrics row, so every worker sees whether two workers got identical batches (an unsharded
  dataset under MultiWorkerMirroredStrategy: a common mistake that wastes every worker but one).
- The metrics row rides in the gradient all-reduce of the sync step (one collective, not two):
  each replica writes its row into its own line of a zero matrix, and the SUM all-reduce that
  carries the gradients returns every replica's row. A separate all_gather was a second
  collective round trip at each sync point, most of the harness's overhead on a 5 ms step
  (bench/harness.md).
"""
from __future__ import annotations

import contextlib

import tensorflow as tf

# The row is float32, which holds every integer below 2**24 exactly: a 24-bit hash. Two
# different batches collide once in 16 million; a false alarm is a warning, not a stop.
FP_BUCKETS = 2 ** 24
NO_FP = -1.0            # "not hashed": every step but an attempt's first
DATA_CHECK = "data_check.json"   # written by the chief when workers' first batches are identical


def wait_counter() -> tf.Variable:
    """Seconds spent waiting for batches, on the host (a GPU copy would need a transfer)."""
    with tf.device("/cpu:0"):
        return tf.Variable(0.0, dtype=tf.float64, trainable=False, name="input_wait_s")


def timed_next(iterator, total: tf.Variable | None):
    """``next(iterator)`` in a tf.function; with ``total``, add the seconds it took to it."""
    if total is None:
        return next(iterator)
    t0 = tf.timestamp()
    with tf.control_dependencies([t0]):
        batch = next(iterator)
    with tf.control_dependencies(tf.nest.flatten(batch, expand_composites=True)):
        total.assign_add(tf.timestamp() - t0)
    return batch


def fingerprint(batch) -> tf.Tensor:
    """A 24-bit hash of every tensor of the batch (values, shapes and dtypes), as float32."""
    parts = [tf.io.serialize_tensor(t) for t in tf.nest.flatten(batch, expand_composites=True)]
    joined = tf.strings.reduce_join(tf.stack(parts))
    return tf.cast(tf.strings.to_hash_bucket_fast(joined, FP_BUCKETS), tf.float32)


def maybe_fingerprint(flag, batch) -> tf.Tensor:
    """The batch's hash when ``flag`` > 0 (an attempt's first step), else NO_FP: hashing a big
    batch at every sync point would cost more than the rest of the instrumentation."""
    return tf.cond(flag > 0, lambda: fingerprint(batch), lambda: tf.constant(NO_FP))


def can_fold(optimizer) -> bool:
    """Whether the sync step may sum the gradients itself (with the metrics row in the same
    all-reduce) and give the optimizer sums. Only where that changes nothing: Keras clips and
    accumulates gradients BEFORE its all-reduce, so an optimizer that does either keeps its own
    reduction, and so does any optimizer without the Keras 3 TensorFlow hook."""
    if not hasattr(type(optimizer), "_all_reduce_sum_gradients"):
        return False
    if hasattr(optimizer, "inner_optimizer"):       # LossScaleOptimizer: scales, then reduces
        return False
    return not any(getattr(optimizer, name, None) for name in
                   ("clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps"))


@contextlib.contextmanager
def presummed(optimizer, on: bool):
    """While a sync step is traced, the optimizer takes the gradients as already summed.
    An instance attribute shadows the Keras method for the trace only; the traced graph keeps
    no reference to it."""
    if not on:
        yield
        return
    optimizer._all_reduce_sum_gradients = list
    try:
        yield
    finally:
        del optimizer._all_reduce_sum_gradients


def own_row_matrix(out: tf.Tensor, replicas: int) -> tf.Tensor:
    """[replicas, len(out)] zeros with this replica's row in its own line: a SUM of these over
    all replicas is an all_gather."""
    ctx = tf.distribute.get_replica_context()
    slot = tf.one_hot(ctx.replica_id_in_sync_group, replicas, dtype=out.dtype)
    return slot[:, None] * out[None, :]


# ---- pure Python: the sync point's figures ------------------------------------------------------
def wait_share(waited_s: float, window_s: float) -> float:
    """Share of the window spent waiting for data, 0..1; NaN when there is no window yet."""
    if not window_s or window_s <= 0:
        return float("nan")
    return min(1.0, max(0.0, waited_s / window_s))


def same_data_groups(fingerprints: dict[str, list[float]]) -> list[list[str]]:
    """Groups of two or more tasks whose first batches hashed alike (task -> its replicas'
    hashes; NO_FP where none was taken). [] when every worker read its own data."""
    by_hash: dict[float, set] = {}
    for task, values in fingerprints.items():
        for v in values:
            if v != NO_FP and v == v:   # v == v: not NaN
                by_hash.setdefault(v, set()).add(task)
    groups = {tuple(sorted(ts)) for ts in by_hash.values() if len(ts) > 1}
    return [list(g) for g in sorted(groups)]


def endless(ds, steps: int, ctx):
    """Mark a dataset that the run cannot exhaust as infinite. For a dataset that may end,
    MultiWorkerMirroredStrategy's iterator handles a last partial batch: every ``next()`` then
    runs an all-reduce of "do you still have data?" across the workers, a collective round trip
    per step (and the input wait it measures would include waiting for the peers). The job
    contract asks for an endless dataset; one of 2**62 elements counts as finite to TensorFlow.
    One that is too short for this run is left alone (it ends the run as before); one that ends
    although its size was unknown now fails with "expected infinite elements" at its end."""
    n = int(ds.cardinality())
    if n == tf.data.INFINITE_CARDINALITY:
        return ds
    per_step = max(1, ctx.num_replicas_in_sync // ctx.num_input_pipelines)
    if n != tf.data.UNKNOWN_CARDINALITY and n < steps * per_step:
        return ds
    return ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
