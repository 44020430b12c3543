"""Handwritten digits job: scikit-learn's ``load_digits`` (1,797 8x8 images, 10 classes), which
ships inside the scikit-learn package, so nothing is downloaded. Every worker host needs
scikit-learn installed; without it the job stops with a clear message.

Sharding: the standard pattern, ``dataset.shard(num_input_pipelines, input_pipeline_id)``:
each worker reads a disjoint part of the data.

Metrics and validation: ``metrics_fn`` reports accuracy beside the loss, and the last 297
digits (never trained on) are the validation set (val_loss, val_accuracy at each epoch end).
"""
import keras
import tensorflow as tf

# 297 digits are held out for validation: 148 a worker with two workers, 4 batches of 32.
DEFAULTS = {"epochs": 3, "steps_per_epoch": 100, "learning_rate": 0.003, "val_steps": 4}
HELD_OUT = 297
PARAMS = dict(DEFAULTS)   # the harness replaces this with the settled parameters


def _load():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise RuntimeError(
            "examples/digits.py needs scikit-learn on every worker host (its load_digits data "
            "ships inside the package); install scikit-learn there or use examples/synthetic.py"
        ) from None
    data = load_digits()
    return (data.data / 16.0).astype("float32"), data.target.astype("int32")


def make_dataset(input_context, batch_size, seed):
    x, y = _load()
    ds = tf.data.Dataset.from_tensor_slices((x[:-HELD_OUT], y[:-HELD_OUT]))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    ds = ds.shuffle(2048, seed=seed, reshuffle_each_iteration=True).repeat()
    return ds.batch(batch_size, drop_remainder=True).prefetch(2)


def make_val_dataset(input_context, batch_size, seed):
    """The held-out digits, each worker its shard; validated at each epoch end."""
    x, y = _load()
    ds = tf.data.Dataset.from_tensor_slices((x[-HELD_OUT:], y[-HELD_OUT:]))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(batch_size, drop_remainder=True)


def metrics_fn(labels, predictions):
    """Per example, like loss_fn: 1.0 where the top logit is the label."""
    hit = tf.equal(tf.argmax(predictions, axis=-1, output_type=tf.int32), labels)
    return {"accuracy": tf.cast(hit, tf.float32)}


def build_model():
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def loss_fn(labels, predictions):
    return keras.losses.sparse_categorical_crossentropy(labels, predictions, from_logits=True)


def make_optimizer():
    return keras.optimizers.Adam(learning_rate=float(PARAMS["learning_rate"]))


def probe_batch():
    return _load()[0][:16]
