"""The Keras callback's own host work per sync, loss only against metrics and validation.

One process, one worker (no gather: bench/keras_callback.py measures that ~3 ms collective), a
tf_keras ``fit`` with ``KerasCallback(every=10)``. Every hook of the callback is timed with
``perf_counter`` (wall, so a loaded machine inflates it; the medians of many calls are steadier
than whole-fit ratios). Variants: loss only; ``metrics=["mae", "mse"]``; the same plus
``validation_data`` (the epoch-end hook then also reads and folds the validation state).

    .venv/bin/python bench/keras_sync_cost.py [--steps 300] [--epochs 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras, tfconsole
steps, epochs, variant = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse",
              metrics=None if variant == "loss" else ["mae", "mse"])
x = np.random.RandomState(0).normal(size=(4096, 32)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)
val = tf.data.Dataset.from_tensor_slices((x[:512], x[:512, :1])).batch(64) if variant == "validation" else None
cb = tfconsole.KerasCallback(every=10, save_at_epoch_end=False)
times = {}
for name in ("on_train_batch_end", "on_epoch_end", "on_test_begin", "on_test_end"):
    original = getattr(cb, name)
    def timed(*a, _f=original, _n=name, **k):
        t0 = time.perf_counter()
        _f(*a, **k)
        times.setdefault(_n, []).append(time.perf_counter() - t0)
    setattr(cb, name, timed)
real_sync = cb._sync
syncs = []
def sync(*a, **k):
    t0 = time.perf_counter()
    real_sync(*a, **k)
    syncs.append(time.perf_counter() - t0)
cb._sync = sync
model.fit(ds, epochs=epochs, steps_per_epoch=steps, validation_data=val, callbacks=[cb], verbose=0)
batch = sorted(times["on_train_batch_end"])
print("RESULT", json.dumps({"syncs": syncs[2:], "batch_hook": batch[: len(batch) - len(syncs)],
                            "epoch_end": times.get("on_epoch_end", [])[1:]}))
"""


def run(variant: str, a, run_dir: str) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(Path(run_dir) / "lib"), "TFCONSOLE_RUN_DIR": run_dir,
           "TFCONSOLE_RUN_ID": "bench", "TFCONSOLE_ATTEMPT": "1", "TFCONSOLE_TASK": "worker-0",
           "TFCONSOLE_IS_CHIEF": "1"}
    env.pop("TF_CONFIG", None)
    out = subprocess.run([sys.executable, "-c", WORKER, str(a.steps), str(a.epochs), variant],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.split("RESULT ", 1)[1])


def ms(values: list) -> float | None:
    return round(1000 * statistics.median(values), 3) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--epochs", type=int, default=4)
    a = p.parse_args()
    report = {"load_before": [round(x, 2) for x in os.getloadavg()]}
    for variant in ("loss", "metrics", "validation"):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "lib").mkdir()
            (Path(tmp) / "lib" / "tfconsole").symlink_to(ROOT / "backend" / "client")
            r = run(variant, a, tmp)
        report[variant] = {"sync_ms_median": ms(r["syncs"]), "syncs": len(r["syncs"]),
                           "epoch_end_ms_median": ms(r["epoch_end"]),
                           "other_batch_hook_ms_median": ms(r["batch_hook"])}
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
