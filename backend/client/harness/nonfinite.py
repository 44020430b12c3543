"""Training health on the worker: versions each task runs with, and non-finite metrics.

Keras 3.7-3.9 under ``tf.distribute`` is known to produce NaN losses (keras-team/keras#21061),
so a NaN is reported with the TensorFlow and Keras versions of every worker: each task writes
its own ``tasks/<task>.versions.json``. Every metric is checked, not only the loss: every worker
sees every worker's values at each sync point (the gathered rows, and a validation's gather), so
all of them find the same NaN at the same step: with ``stop_on_nan`` they
all stop together, and none is left waiting in a collective.
"""
from __future__ import annotations

import json
import math
import os
import platform
import socket

from . import layout

HEALTH = "health.json"   # written by the chief at the first non-finite loss


class NonFiniteLoss(Exception):
    """The loss or another metric became NaN or Inf and the job asked to stop on it
    (``stop_on_nan``). The name stays: logs and diagnoses match on it."""


def versions(keras=None) -> dict:
    """This worker's versions; ``keras``: the Keras module the job trains with (tf_keras for a
    Keras 2 script), else Keras 3's."""
    if keras is None:
        import keras
    import tensorflow as tf
    build = tf.sysconfig.get_build_info()
    return {"tensorflow": tf.__version__, "keras": keras.__version__,
            "python": platform.python_version(), "host": socket.gethostname(),
            "cuda": build.get("cuda_version") or "none (CPU build)"}


MAX_PACKAGES = 1000   # the file is read back with a 64 KiB bound (backend.diagnosis.health)


def packages() -> list[str]:
    """``pip freeze`` without pip: name==version of every installed distribution, sorted."""
    from importlib import metadata
    found = {f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions() if d.metadata["Name"]}
    return sorted(found, key=str.lower)[:MAX_PACKAGES]


def write_versions(run: str, task: str, keras=None) -> dict:
    """Write this task's versions and installed packages (the run's record keeps them); return
    the versions alone."""
    info = versions(keras)
    path = layout.task_file(run, task, "versions.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp", "w") as fh:
        json.dump({**info, "packages": packages()}, fh)
    os.replace(f"{path}.tmp", path)
    return info


def non_finite(values: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The NaN or Inf values at this sync point: ``{task: {metric: value}}`` of every metric
    (the loss, the job's metrics, validation values; "global" for the global-only ones)."""
    out = {}
    for task, named in values.items():
        bad = {name: v for name, v in named.items() if not math.isfinite(v)}
        if bad:
            out[task] = bad
    return out


class Watch:
    """Checks each sync point's values; records the first bad one, and stops if asked to."""

    def __init__(self, run: str, *, is_chief: bool, stop: bool) -> None:
        self.run, self.is_chief, self.stop = run, is_chief, stop
        self.seen = False

    def check(self, step: int, values: dict[str, dict[str, float]], versions_here: dict) -> None:
        bad = non_finite(values)
        if not bad:
            return
        what = ", ".join(f"{t} {name} {v}" for t, named in sorted(bad.items())
                         for name, v in named.items())
        names = sorted({name for named in bad.values() for name in named})
        subject = "loss" if "loss" in names else f"metric {', '.join(names)}"
        if self.is_chief and not self.seen:
            # "losses" as before (the console's status reads it); "metrics" names every value.
            record = {"step": step,
                      "losses": {t: str(n["loss"]) for t, n in bad.items() if "loss" in n},
                      "metrics": {t: {k: str(v) for k, v in n.items()} for t, n in bad.items()},
                      "chief_versions": versions_here, "stopped": self.stop}
            with open(os.path.join(self.run, f"{HEALTH}.tmp"), "w") as fh:
                json.dump(record, fh)
            os.replace(os.path.join(self.run, f"{HEALTH}.tmp"), os.path.join(self.run, HEALTH))
        if not self.seen:
            print(f"NON-FINITE {'LOSS' if subject == 'loss' else 'METRIC'} at step {step}: {what} (TensorFlow "
                  f"{versions_here.get('tensorflow')}, Keras {versions_here.get('keras')})", flush=True)
        self.seen = True
        if self.stop:
            raise NonFiniteLoss(
                f"{subject} is not finite at step {step} ({what}); stop_on_nan is set, so every "
                f"worker stopped. Lower the learning rate or check the data (and metrics_fn); "
                f"Keras 3.7-3.9 under tf.distribute is known to give NaN losses "
                f"(keras-team/keras#21061), this worker runs Keras {versions_here.get('keras')}")
