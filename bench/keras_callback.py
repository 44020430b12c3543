"""What ``tfconsole.KerasCallback`` costs a tf_keras ``model.fit`` under MultiWorkerMirroredStrategy.

Two local workers (TF_CONFIG by hand, a throwaway run folder) train the same small model at a few
ms per step. Inside the same two processes, ``fit`` runs again and again, alternating without
and with the callback (ABBA order), so a load change on shared cores hits both variants of a pair
alike and process start-up is not measured. Each ``fit`` has two epochs: the first warms up
(tracing, the callback's first gather), the second is timed, wall and CPU. The figure is the
median over pairs of (callback / none - 1): per-pair ratios, not best-of runs.

The callback runs as a user gets it (default schedule: a gather every 10 steps but no more often
than every 0.25 s, the Save now check, the chief's metric lines; ``--every K`` for exactly every K
steps) with ``save_at_epoch_end=False``: a checkpoint is a per-epoch cost, not
a per-step one; ``--with-checkpoints`` keeps the epoch-end save inside the timed epoch.
``--metrics``: the model also compiles ``metrics=["mae"]`` and ``fit`` validates on 512 examples
at every epoch end, in both variants alike (the callback then carries two mean metrics, for
training and validation, and its epoch-end sync the validation state).

    .venv/bin/python bench/keras_callback.py [--steps 300] [--pairs 10] [--every K] [--metrics]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paired_timing import measure  # noqa: E402

WORKER = r"""
import json, os, sys, time
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as keras
import tfconsole
steps, every, pairs, ckpt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
with_metrics = sys.argv[5] == "1"
keras.utils.set_random_seed(0)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse",
                  metrics=["mae"] if with_metrics else None)
x = np.random.RandomState(0).normal(size=(4096, 32)).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).repeat().batch(64)
val = tf.data.Dataset.from_tensor_slices((x[:512], x[:512, :1])).batch(64) if with_metrics else None

class Clock(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            self.t0, self.c0 = time.perf_counter(), time.process_time()
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1:
            self.ms = (time.perf_counter() - self.t0) * 1000 / steps
            self.cpu = (time.process_time() - self.c0) * 1000 / steps

for i in range(pairs):
    for use in ((False, True) if i % 2 == 0 else (True, False)):
        clock = Clock()
        opts = {"every": every} if every else {}   # 0: the default schedule
        cbs = [clock] + ([tfconsole.KerasCallback(save_at_epoch_end=ckpt, **opts)] if use else [])
        model.fit(ds, epochs=2, steps_per_epoch=steps, callbacks=cbs, verbose=0,
                  validation_data=val)
        print("SEG", i, int(use), clock.ms, clock.cpu, flush=True)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps per epoch (2 epochs per fit)")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--every", type=int, default=0,
                   help="KerasCallback(every=K); 0 (default): the callback's default schedule")
    p.add_argument("--with-checkpoints", action="store_true")
    p.add_argument("--metrics", action="store_true",
                   help='compile metrics=["mae"] and validate at each epoch end (both variants)')
    a = p.parse_args()
    print(json.dumps({
        "every": a.every, "steps": a.steps, "pairs": a.pairs, "checkpoints": a.with_checkpoints,
        "metrics": a.metrics,
        **measure(WORKER, [str(a.steps), str(a.every), str(a.pairs),
                           "1" if a.with_checkpoints else "0", "1" if a.metrics else "0"],
                  pairs=a.pairs, variant="callback")}))


if __name__ == "__main__":
    main()
