"""Handwritten digits job: scikit-learn's ``load_digits`` (1,797 8x8 images, 10 classes), which
ships inside the scikit-learn package, so nothing is downloaded. Every worker host needs
scikit-learn installed; without it the job stops with a clear message.

Sharding: the standard pattern, ``dataset.shard(num_input_pipelines, input_pipeline_id)``:
each worker reads a disjoint part of the data.
"""
import keras
import tensorflow as tf

DEFAULTS = {"epochs": 3, "steps_per_epoch": 100, "learning_rate": 0.003}
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
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    ds = ds.shuffle(2048, seed=seed, reshuffle_each_iteration=True).repeat()
    return ds.batch(batch_size, drop_remainder=True).prefetch(2)


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
