"""What ``tfconsole.KerasCallback`` costs a tf_keras ``model.fit`` under MultiWorkerMirroredStrategy.

Two local workers (TF_CONFIG by hand, a throwaway run folder), the same small model at a few ms
per step, fit with and without the callback, alternated ``--rounds`` times so load drifts hit
both alike. Steps/s is timed from the end of epoch 1 (tracing and the first gather done) to the
end of the fit, by a tiny timing callback in both variants, with the CPU time per step (the
steadier figure on shared cores).

    .venv/bin/python bench/keras_callback.py [--steps 600] [--rounds 3] [--every 10]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras
steps, every, use = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "on"
keras.utils.set_random_seed(0)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
x = np.random.RandomState(0).normal(size=(4096, 32)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)

class Clock(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            self.t0, self.c0 = time.perf_counter(), time.process_time()
    def on_train_end(self, logs=None):
        self.rate = steps * 2 / (time.perf_counter() - self.t0)
        self.cpu_ms = (time.process_time() - self.c0) * 1000 / (steps * 2)

clock = Clock()
cbs = [clock]
hook = [0.0]
if use:
    import tfconsole
    cb = tfconsole.KerasCallback(every=every)
    inner = cb.on_train_batch_end
    def timed(batch, logs=None):
        t = time.perf_counter()
        inner(batch, logs)
        if getattr(clock, "t0", None):
            hook[0] += time.perf_counter() - t
    cb.on_train_batch_end = timed
    cbs.append(cb)
model.fit(ds, epochs=3, steps_per_epoch=steps, callbacks=cbs, verbose=0)
print("RATE", clock.rate, clock.cpu_ms, hook[0] * 1000 / (steps * 2), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(steps: int, every: int, use: bool, run_dir: str) -> tuple[float, float]:
    """(steps/s of the slower worker, CPU ms per step summed over both workers)."""
    ports = [free_port(), free_port()]
    procs = []
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
               "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                        "task": {"type": "worker", "index": i}}),
               "PYTHONPATH": str(Path(run_dir) / "lib")}
        if use:
            env.update(TFCONSOLE_RUN_DIR=run_dir, TFCONSOLE_RUN_ID="bench", TFCONSOLE_ATTEMPT="1",
                       TFCONSOLE_TASK=f"worker-{i}", TFCONSOLE_IS_CHIEF="1" if i == 0 else "0")
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, str(steps), str(every),
                                       "on" if use else "off"], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=900)
        rows += [line.split()[1:] for line in out.splitlines() if line.startswith("RATE")]
    assert len(rows) == 2, "a worker failed"
    if use:   # wall ms per step spent inside the callback's batch hook, the slower worker
        print("  in the callback:", max(float(r[2]) for r in rows), "ms/step", flush=True)
    return min(float(r[0]) for r in rows), sum(float(r[1]) for r in rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600, help="steps per epoch (3 epochs)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--every", type=int, default=10)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lib").mkdir()
        (Path(tmp) / "lib" / "tfconsole").symlink_to(ROOT / "backend" / "client")
        (Path(tmp) / "harness").symlink_to(ROOT / "backend" / "harness")
        rates, cpu = {"none": [], "callback": []}, {"none": [], "callback": []}
        for _ in range(a.rounds):
            for name in rates:
                r, c = one(a.steps, a.every, name == "callback", tmp)
                rates[name].append(round(r, 1))
                cpu[name].append(round(c, 3))
                print(name, rates[name][-1], "steps/s", cpu[name][-1], "CPU ms/step", flush=True)
    best = {k: max(v) for k, v in rates.items()}
    least = {k: min(v) for k, v in cpu.items()}
    # CPU time per step is the steadier figure where other work shares the cores.
    print(json.dumps({"steps_per_sec": rates, "cpu_ms_per_step": cpu, "every": a.every,
                      "cost_pct_best_rate": round(100 * (1 - best["callback"] / best["none"]), 1),
                      "cost_pct_least_cpu": round(100 * (least["callback"] / least["none"] - 1), 1)}))


if __name__ == "__main__":
    main()
