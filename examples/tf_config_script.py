"""A bring-your-own training script: reads TF_CONFIG itself, no harness.

It trains a tiny regression model with MultiWorkerMirroredStrategy and a custom loop (Keras 3
`model.fit` does not work under that strategy) and prints each step's loss. Run it as a
`command` job:  job.yaml -> {kind: command, command: [examples/tf_config_script.py, --steps, "50"]}
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step (tests)")
    a = p.parse_args()
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.05)
    # Each worker draws its own data from its own seed: fixed, so runs are repeatable.
    x_all = tf.random.stateless_normal((a.steps, 16, 4), seed=(task.get("index", 0), 7))
    w_true = tf.constant([[1.0], [-2.0], [0.5], [3.0]])

    @tf.function
    def step(x):
        def replica_step(x):
            y = x @ w_true
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(tf.square(model(x) - y)[:, 0], global_batch_size=32)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        per_replica = strategy.run(replica_step, args=(x,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    for i in range(a.steps):
        loss = float(step(x_all[i]))
        print(f"{task.get('type', 'worker')}-{task.get('index', 0)} step {i + 1} loss {loss:.4f}", flush=True)
        if a.sleep:
            import time
            time.sleep(a.sleep)
    print("done", flush=True)


if __name__ == "__main__":
    main()
