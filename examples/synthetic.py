"""Synthetic regression job: data generated from the seed, nothing to download.

A fixed random "teacher" function makes the targets; a small MLP learns it, so the loss drops
visibly within a few hundred steps on CPU. Run it with the harness:

    python backend/client/harness/train.py --run-dir runs/demo --job examples/synthetic.py --run-id demo

Sharding: the stream is cut into GLOBAL batches first and each worker takes its own slice of
every global batch. The set of examples in a step is then the same whatever the number of
workers, so a two-worker run follows a one-worker run with the same seed (up to float rounding).

Metrics and validation: ``metrics_fn`` adds the mean absolute error beside the loss, and
``make_val_dataset`` gives held-out examples of the same teacher, validated at each epoch end
(val_loss, val_mae: per worker and global, on Monitor and in TensorBoard's validation run).
"""
import keras
import tensorflow as tf

DIM = 16
DEFAULTS = {"epochs": 3, "steps_per_epoch": 100, "learning_rate": 0.01, "hidden": 32,
            "val_steps": 4}
PARAMS = dict(DEFAULTS)   # the harness replaces this with the settled parameters


def _teacher(seed):
    w1 = tf.random.stateless_normal([DIM, 8], seed=[seed, 1])
    w2 = tf.random.stateless_normal([8, 1], seed=[seed, 2]) / 3.0
    return w1, w2


def _global_batch(seed, index, size, held_out=False):
    """Global batch number ``index``: a pure function of (seed, index). ``held_out``: from
    another stream of inputs, the same teacher (the validation set)."""
    w1, w2 = _teacher(seed)
    stream = tf.cast(seed, tf.int64) + (1000 if held_out else 0)
    x = tf.random.stateless_normal([size, DIM], seed=tf.stack([stream + 100, index]))
    noise = 0.05 * tf.random.stateless_normal([size, 1], seed=tf.stack([stream + 200, index]))
    y = tf.matmul(tf.tanh(tf.matmul(x, w1)), w2) * 3.0 + noise
    return x, y


def make_dataset(input_context, batch_size, seed, held_out=False):
    replicas_here = input_context.num_replicas_in_sync // input_context.num_input_pipelines
    global_size = batch_size * input_context.num_replicas_in_sync
    width = batch_size * replicas_here                  # this worker's slice of a global batch
    lo = input_context.input_pipeline_id * width

    def worker_slice(index):
        x, y = _global_batch(seed, index, global_size, held_out)
        return x[lo:lo + width], y[lo:lo + width]

    ds = tf.data.Dataset.range(2 ** 62).map(worker_slice)  # endless: "repeat forever"
    if replicas_here > 1:   # several GPUs on this worker: one per-replica batch each
        ds = ds.unbatch().batch(batch_size, drop_remainder=True)
    return ds.prefetch(2)


def make_val_dataset(input_context, batch_size, seed):
    """Held-out inputs of the same teacher. The harness reads the first ``val_steps`` batches
    at every validation (each epoch end by default), so each validation sees the same set."""
    return make_dataset(input_context, batch_size, seed, held_out=True)


def build_model():
    return keras.Sequential([
        keras.Input(shape=(DIM,)),
        keras.layers.Dense(int(PARAMS["hidden"]), activation="relu"),
        keras.layers.Dense(int(PARAMS["hidden"]), activation="relu"),
        keras.layers.Dense(1),
    ])


def loss_fn(labels, predictions):
    return tf.reduce_mean(tf.square(labels - predictions), axis=-1)   # per example: shape [B]


def metrics_fn(labels, predictions):
    """Per example, like loss_fn: the harness reports each worker's mean and the global one."""
    return {"mae": tf.reduce_mean(tf.abs(labels - predictions), axis=-1)}


def make_optimizer():
    return keras.optimizers.Adam(learning_rate=float(PARAMS["learning_rate"]))


def probe_batch():
    return _global_batch(0, 10 ** 6, 16)[0]
