"""What ``tfconsole.Loop`` costs a custom training loop under MultiWorkerMirroredStrategy.

Two local workers (TF_CONFIG by hand, a throwaway run folder) run the same custom loop as
TensorFlow's tutorial writes it (``strategy.run`` of a step returning
``tf.nn.compute_average_loss``, ``strategy.reduce`` of the result) on a small Keras 3 model at a
few ms per step. Inside the same two processes, segments of ``--steps`` steps alternate without
and with the loop (ABBA order; "without": ``strategy.run`` and nothing after the step; "with":
``loop.run`` inside the step and ``loop.step(...)`` after it, with one mean metric, the default
schedule: a gather every 10 steps but no more often than every 0.25 s, the Save now check, the
chief's lines), so a load change on shared cores hits both variants of a pair alike and start-up
is not measured. One warm-up segment of each variant first (tracing, the first gather). The
figure is the median over pairs of (loop / none - 1), wall of the slower worker and CPU summed.

    .venv/bin/python bench/custom_loop.py [--steps 300] [--pairs 10] [--every K]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paired_timing import measure  # noqa: E402

WORKER = r"""
import os, sys, time
import numpy as np, tensorflow as tf, keras
import tfconsole
steps, every, pairs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
keras.utils.set_random_seed(0)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL = 64
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(1e-3)
    mae = keras.metrics.MeanAbsoluteError(name="mae")
x = np.random.RandomState(0).normal(size=(4096, 32)).astype("float32")
def make(ctx):
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.repeat().batch(ctx.get_per_replica_batch_size(GLOBAL))
it = iter(strategy.distribute_datasets_from_function(make))
loop = tfconsole.Loop(strategy, model=model, metrics=[mae], **({"every": every} if every else {}))

def step_fn(inputs):
    xb, yb = inputs
    with tf.GradientTape() as tape:
        pred = model(xb, training=True)
        loss = tf.nn.compute_average_loss(tf.reduce_mean(tf.square(pred - yb), axis=1),
                                          global_batch_size=GLOBAL)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    mae.update_state(yb, pred)
    return loss

@tf.function
def plain(iterator):
    return strategy.reduce("SUM", strategy.run(step_fn, args=(next(iterator),)), axis=None)

@tf.function
def with_loop(iterator):
    return strategy.reduce("SUM", loop.run(step_fn, args=(next(iterator),)), axis=None)

def segment(use):
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        if use:
            loop.step(with_loop(it))
        else:
            plain(it)
    return (time.perf_counter() - t0) * 1000 / steps, (time.process_time() - c0) * 1000 / steps

segment(False); segment(True)   # warm-up: tracing, the first gather
for i in range(pairs):
    for use in ((False, True) if i % 2 == 0 else (True, False)):
        ms, cpu = segment(use)
        print("SEG", i, int(use), ms, cpu, flush=True)
os._exit(0)   # collective teardown at exit can hang (harness/train.py)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps per timed segment")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--every", type=int, default=0,
                   help="Loop(every=K); 0 (default): the loop's default schedule")
    a = p.parse_args()
    print(json.dumps({
        "every": a.every, "steps": a.steps, "pairs": a.pairs,
        **measure(WORKER, [str(a.steps), str(a.every), str(a.pairs)], pairs=a.pairs,
                  variant="loop")}))


if __name__ == "__main__":
    main()
