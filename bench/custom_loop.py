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
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(a, run_dir: str) -> dict:
    """{(pair, use): (wall ms/step of the slower worker, CPU ms/step summed over workers)}."""
    ports = [free_port(), free_port()]
    procs = []
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
               "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                        "task": {"type": "worker", "index": i}}),
               "PYTHONPATH": str(Path(run_dir) / "lib"),
               "TFCONSOLE_RUN_DIR": run_dir, "TFCONSOLE_RUN_ID": "bench", "TFCONSOLE_ATTEMPT": "1",
               "TFCONSOLE_TASK": f"worker-{i}", "TFCONSOLE_IS_CHIEF": "1" if i == 0 else "0"}
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(a.steps), str(a.every),
                                       str(a.pairs)],
                                      env=env, text=True, stdout=subprocess.PIPE))
    segs: dict = {}
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        assert p.returncode == 0, f"a worker failed (exit {p.returncode})"
        for line in out.splitlines():
            if line.startswith("SEG"):
                _, i, use, ms, cpu = line.split()
                old = segs.get((int(i), int(use)), (0.0, 0.0))
                segs[(int(i), int(use))] = (max(old[0], float(ms)), old[1] + float(cpu))
    return segs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps per timed segment")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--every", type=int, default=0,
                   help="Loop(every=K); 0 (default): the loop's default schedule")
    a = p.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lib").mkdir()
        (Path(tmp) / "lib" / "tfconsole").symlink_to(ROOT / "backend" / "client")
        (Path(tmp) / "harness").symlink_to(ROOT / "backend" / "harness")
        segs = run(a, tmp)
    pairs = range(a.pairs)
    wall = [100 * (segs[(i, 1)][0] / segs[(i, 0)][0] - 1) for i in pairs]
    cpu = [100 * (segs[(i, 1)][1] / segs[(i, 0)][1] - 1) for i in pairs]
    print(json.dumps({
        "every": a.every, "steps": a.steps, "pairs": a.pairs,
        "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
        "ms_per_step_none": [round(segs[(i, 0)][0], 2) for i in pairs],
        "ms_per_step_loop": [round(segs[(i, 1)][0], 2) for i in pairs],
        "median_ms_none": round(statistics.median(segs[(i, 0)][0] for i in pairs), 2),
        "cost_pct_wall_median": round(statistics.median(wall), 1),
        "cost_pct_wall_per_pair": [round(x, 1) for x in wall],
        "cost_pct_cpu_median": round(statistics.median(cpu), 1)}))


if __name__ == "__main__":
    main()
