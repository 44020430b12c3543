"""Bring your own training script, and still get live curves in the console.

The console draws RUN/metrics.jsonl. A script that does not use the harness can write the same
lines with ``MetricsReporter`` from the harness's report.py (standard library only), which the
launcher copies into RUN/harness/. This script trains a small Keras 3 model in one process with
its own loop and reports every 10 steps:

    python examples/byo_script.py --run-dir runs/byo --run-id byo [--steps 200]

In a multi-worker script only the chief should write; compute each worker's loss yourself (do
not use the numbers Keras' callbacks print under a strategy: they are summed over workers).
"""
import argparse
import os
import sys
import time


def find_reporter(run_dir):
    # The run's copy first (what the launcher ships: RUN/lib/tfconsole/), then this checkout's.
    lib = os.path.join(run_dir, "lib")
    if os.path.exists(os.path.join(lib, "tfconsole", "harness", "report.py")):
        sys.path.insert(0, os.path.abspath(lib))
        from tfconsole.harness.report import MetricsReporter
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
        from backend.client.harness.report import MetricsReporter
    return MetricsReporter


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--run-dir", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--attempt", type=int, default=0)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    MetricsReporter = find_reporter(args.run_dir)

    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(0)
    x = tf.random.normal([2048, 8])
    y = tf.reduce_sum(x[:, :4], axis=1, keepdims=True) - x[:, 4:5] ** 2
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(0.01)
    batch = 64

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        return loss

    with MetricsReporter(args.run_dir, args.run_id, args.attempt) as rep:
        t_last, losses = time.time(), []
        for s in range(1, args.steps + 1):
            i = (s * batch) % (2048 - batch)
            losses.append(float(step(x[i:i + batch], y[i:i + batch])))
            if s % 10 == 0:
                dt = (time.time() - t_last) / 10
                loss = sum(losses) / len(losses)
                rep.log("worker-0", s, 1, metrics={"loss": loss}, global_metrics={"loss": loss},
                        step_time=dt, examples_per_sec=batch / dt)
                print(f"step {s} loss {loss:.4f}", flush=True)
                t_last, losses = time.time(), []


if __name__ == "__main__":
    main()
