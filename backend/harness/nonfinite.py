"""Training health on the worker: versions each task runs with, and non-finite losses.

Keras 3.7-3.9 under ``tf.distribute`` is known to produce NaN losses (keras-team/keras#21061),
so a NaN is reported with the TensorFlow and Keras versions of every worker: each task writes
its own ``tasks/<task>.versions.json``. Every worker sees every worker's loss at each sync point
(the all_gather), so all of them find the same NaN at the same step: with ``stop_on_nan`` they
all stop together, and none is left waiting in a collective.
"""
from __future__ import annotations

import json
import math
import os
import platform
import socket

import layout

HEALTH = "health.json"   # written by the chief at the first non-finite loss


class NonFiniteLoss(Exception):
    """The loss became NaN or Inf and the job asked to stop on it (``stop_on_nan``)."""


def versions() -> dict:
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


def write_versions(run: str, task: str) -> dict:
    """Write this task's versions and installed packages (the run's record keeps them); return
    the versions alone."""
    info = versions()
    path = layout.task_file(run, task, "versions.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp", "w") as fh:
        json.dump({**info, "packages": packages()}, fh)
    os.replace(f"{path}.tmp", path)
    return info


def non_finite(losses: dict[str, float]) -> dict[str, float]:
    """The tasks whose loss is NaN or Inf at this sync point."""
    return {task: v for task, v in losses.items() if not math.isfinite(v)}


class Watch:
    """Checks each sync point's losses; records the first bad one, and stops if asked to."""

    def __init__(self, run: str, *, is_chief: bool, stop: bool) -> None:
        self.run, self.is_chief, self.stop = run, is_chief, stop
        self.seen = False

    def check(self, step: int, losses: dict[str, float], versions_here: dict) -> None:
        bad = non_finite(losses)
        if not bad:
            return
        what = ", ".join(f"{t} {v}" for t, v in sorted(bad.items()))
        if self.is_chief and not self.seen:
            record = {"step": step, "losses": {t: str(v) for t, v in bad.items()},
                      "chief_versions": versions_here, "stopped": self.stop}
            with open(os.path.join(self.run, f"{HEALTH}.tmp"), "w") as fh:
                json.dump(record, fh)
            os.replace(os.path.join(self.run, f"{HEALTH}.tmp"), os.path.join(self.run, HEALTH))
        if not self.seen:
            print(f"NON-FINITE LOSS at step {step}: {what} (TensorFlow {versions_here.get('tensorflow')}, "
                  f"Keras {versions_here.get('keras')})", flush=True)
        self.seen = True
        if self.stop:
            raise NonFiniteLoss(
                f"loss is not finite at step {step} ({what}); stop_on_nan is set, so every worker "
                f"stopped. Lower the learning rate or check the data; Keras 3.7-3.9 under "
                f"tf.distribute is known to give NaN losses (keras-team/keras#21061), this worker "
                f"runs Keras {versions_here.get('keras')}")
