"""A custom training loop under MultiWorkerMirroredStrategy, with every console feature.

The shape of the articles and of TensorFlow's "Custom training loop with
MultiWorkerMirroredStrategy" tutorial: ``strategy.run`` of a step that returns
``tf.nn.compute_average_loss(..., global_batch_size=...)``, a ``tf.train.Checkpoint`` of the
model, the optimizer and the epoch saved by a ``tf.train.CheckpointManager`` (its metadata,
``ckpt-<step>.meta.json``: step, epoch, every worker's loss, accuracy), and a chief-only final
save of a plain model that loads with no strategy. Data: scikit-learn's 8x8 digits (no download).

Launch it as a command job (``kind: command``, ``command: [python, examples/custom_loop.py]``):
Monitor draws every worker's loss and accuracy; Save now, Export and Restore work. By hand it
trains in one process and ``tfconsole`` does nothing.

    python examples/custom_loop.py [--epochs 3] [--steps 50] [--batch 64] [--pace 0] [--out DIR]
"""
import argparse
import os

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

try:
    import tfconsole  # shipped with every console run; absent when run by hand from a checkout
except ImportError:
    tfconsole = None


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, default=50, help="steps per epoch")
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--pace", type=float, default=0.0, help="seconds to sleep after each step")
    p.add_argument("--out", default=None, help="chief-only final save: OUT/model.keras")
    return p.parse_args()


def build_model():
    # Export rebuilds this from its config (tfconsole.Loop(model=...)), with no strategy.
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(10)])


def dataset(global_batch, ctx):
    x, y = load_digits(return_X_y=True)
    ds = tf.data.Dataset.from_tensor_slices(((x / 16.0).astype("float32"), y.astype("int64")))
    ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.shuffle(2048, seed=0).repeat().batch(ctx.get_per_replica_batch_size(global_batch))


def main():
    args = parse_args()
    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.Adam(1e-3)
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    data = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset(args.batch, ctx)))
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
    folder = (tfconsole and tfconsole.checkpoint_dir()) or os.path.join("/tmp", "custom_loop_ckpt")
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=5)
    # The loop: live curves, Save now, preemption, listed checkpoints, Export, Restore (it
    # restores TFCONSOLE_RESUME_STEP here, on every worker, and counts on from it).
    loop = tfconsole.Loop(strategy, manager, model=model, metrics=[accuracy],
                          total_steps=args.epochs * args.steps) if tfconsole else None

    @tf.function
    def train_step(iterator):
        def step_fn(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=args.batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(y, logits)
            return loss
        run = loop.run if loop else strategy.run   # loop.run: strategy.run + each worker's own loss
        per_replica = run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    start = loop.current_step if loop else 0   # a restored attempt goes on from its step
    for step in range(start, args.epochs * args.steps):
        loss = train_step(data)
        if loop:
            loop.step(loss)
        if args.pace:
            __import__("time").sleep(args.pace)
        if (step + 1) % args.steps == 0:        # an epoch end: every worker saves, same step
            epoch.assign(step // args.steps)     # 0-based, as the tutorial's; lines show it + 1
            manager.save()                       # ckpt-<step> + its metadata, listed
            print(f"epoch {step // args.steps + 1} loss {float(loss):.4f} "
                  f"accuracy {float(accuracy.result()):.4f}", flush=True)
            accuracy.reset_state()

    if args.out and _is_chief():
        # Chief only, and no collective: a plain model (no strategy) takes the trained weights.
        plain = build_model()
        plain.set_weights(model.get_weights())
        os.makedirs(args.out, exist_ok=True)
        plain.save(os.path.join(args.out, "model.keras"))
        print("saved", os.path.join(args.out, "model.keras"), flush=True)


def _is_chief():
    if tfconsole is not None:
        return tfconsole.context().is_chief
    return True


if __name__ == "__main__":
    main()
