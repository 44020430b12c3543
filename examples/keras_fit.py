"""A Keras user's own script: tf_keras ``model.fit`` under MultiWorkerMirroredStrategy, plus
one callback from the console's client library.

Launch it as a command job (each worker reads TF_CONFIG, which the console sets):

    job: {kind: command, command: [examples/keras_fit.py, --epochs, "3"],
          env: {TF_USE_LEGACY_KERAS: "1"}}

or run it by hand in one process (``python examples/keras_fit.py``): ``tfconsole`` then does
nothing. The data is scikit-learn's bundled ``load_digits`` (no download): the last 297 images
are held out for validation, which ``fit`` runs at every epoch end; the console shows
accuracy and val_loss/val_accuracy per worker and global, and the learning rate. As in the usual
recipe, only the chief writes the final model, in a format that loads without the strategy;
the other workers save to a scratch folder, because every worker must take part in a save.
"""
import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # Keras 2: its fit works under MWMS

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

try:
    import tfconsole  # shipped with every console run; absent when run by hand from a checkout
except ImportError:
    tfconsole = None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (a sweep searches it)")
    p.add_argument("--steps", type=int, default=50, help="steps per epoch")
    p.add_argument("--pace", type=float, default=0.0, help="seconds to sleep after each step")
    p.add_argument("--out", default=None, help="folder for the final model (default: none)")
    return p.parse_args()


HELD_OUT = 297   # load_digits has 1,797 images: 1,500 to train on, the rest to validate


def digits(part: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype("float32"), y.astype("int64")
    return (x[:-HELD_OUT], y[:-HELD_OUT]) if part == "train" else (x[-HELD_OUT:], y[-HELD_OUT:])


def dataset(batch: int) -> tf.data.Dataset:
    x, y = digits("train")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.shuffle(len(x), seed=0).repeat().batch(batch, drop_remainder=True)


def validation(batch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(digits("validation")).batch(batch)


def build_model(lr: float = 1e-3) -> keras.Model:
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class Pace(keras.callbacks.Callback):
    """Sleep after each step: a demo or a test that acts on a live run leaves the cores free."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


def is_chief() -> bool:
    """MultiWorkerMirroredStrategy's rule: the chief task, or worker 0 when there is none."""
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task, cluster = cfg.get("task") or {}, cfg.get("cluster") or {}
    kind = task.get("type", "worker")
    return kind == "chief" or (kind == "worker" and int(task.get("index", 0)) == 0
                               and not cluster.get("chief"))


def main():
    args = parse_args()
    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(args.lr)
    callbacks = [Pace(args.pace)] if args.pace else []
    if tfconsole is not None:
        callbacks.append(tfconsole.KerasCallback(batch_size=args.batch))   # the one added line
    history = model.fit(dataset(args.batch), epochs=args.epochs, steps_per_epoch=args.steps,
                        validation_data=validation(args.batch), callbacks=callbacks, verbose=2)
    print("epoch losses", [round(v, 4) for v in history.history["loss"]],
          "val_accuracy", [round(v, 4) for v in history.history["val_accuracy"]], flush=True)
    if args.out:
        # Every worker saves (a collective may run inside); only the chief's copy is kept.
        target = args.out if is_chief() else tempfile.mkdtemp()
        model.save(os.path.join(target, "model.keras"))
        probe = np.zeros((1, 64), "float32")
        print("saved", target, "prediction", model.predict(probe, verbose=0)[0][:3], flush=True)


if __name__ == "__main__":
    main()
