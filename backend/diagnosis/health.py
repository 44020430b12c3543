"""Training health as the console and ``status`` show it: a NaN or Inf loss, with versions.

The harness records the first non-finite loss in the chief's ``health.json`` and each task's
TensorFlow and Keras versions in ``tasks/<task>.versions.json`` on its own host
(``harness/nonfinite.py``). The console sees a NaN sooner, in the metrics it streams
(``MetricsStore.nonfinite``); both name the versions, because Keras 3.7-3.9 under
``tf.distribute`` is known to give NaN losses (keras-team/keras#21061).
"""
from __future__ import annotations

import json

from backend.hosts import remote
from backend.errors import ConsoleError
from backend.client.harness.contract import layout
from backend.hosts.pool import parallel
from backend.hosts.tasks import RunOnHosts, task_host

HEALTH = "health.json"


def _host(run: RunOnHosts, task: str) -> remote.Host:
    return task_host(run.pool, run.cluster, run.task(task))


def _json(h: remote.Host, rel: str) -> dict | None:
    try:
        data = json.loads(remote.read_tail(h, rel, 1 << 16) or b"null")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def recorded(run: RunOnHosts) -> dict | None:
    """The chief's record of the first non-finite loss (step, losses), or None."""
    return _json(_host(run, run.state.chief.name), HEALTH)


def task_versions(run: RunOnHosts) -> dict[str, dict]:
    """task -> {"tensorflow", "keras", "python", "host"}; {} for a task not yet started or
    whose host does not answer."""
    def one(task: str):
        return _json(_host(run, task), f"{layout.TASKS}/{task}.versions.json") or {}
    found = parallel(one, [(t.name, t.name) for t in run.state.tasks])
    return {task: (v if isinstance(v, dict) else {}) for task, v in found.items()}


def versions_text(versions: dict[str, dict]) -> str:
    parts = [f"{task}: TensorFlow {v.get('tensorflow', '?')}, Keras {v.get('keras', '?')}"
             for task, v in versions.items()]
    return "; ".join(parts) or "versions unknown"


def nan_line(bad: dict[str, tuple[int, float]], versions: dict[str, dict]) -> str:
    """One line for a non-finite loss: who, at which step, and every worker's versions."""
    where = ", ".join(f"{task} {value} at step {step}" for task, (step, value) in sorted(bad.items()))
    return (f"Loss is not finite: {where}. Versions: {versions_text(versions)}. Lower the learning "
            "rate or check the data; Keras 3.7-3.9 under tf.distribute is known to give NaN "
            "losses (keras-team/keras#21061). Set the job parameter stop_on_nan to stop on it.")


def metric_nan_line(bad: dict[str, tuple[str, int, float]], versions: dict[str, dict]) -> str:
    """One line for a non-finite metric other than the loss: which, where, and the versions."""
    where = ", ".join(f"{task} {name} {value} at step {step}"
                      for task, (name, step, value) in sorted(bad.items()))
    return (f"A metric is not finite: {where}. Versions: {versions_text(versions)}. Check the "
            "metric's inputs (an empty validation shard gives 0/0) and the data.")


def status_line(run: RunOnHosts) -> str:
    """For ``status``: the recorded non-finite loss and versions, or "" (also when unreadable)."""
    try:
        found = recorded(run)
        if not found:
            return ""
        bad = {task: (int(found.get("step", -1)), value) for task, value in (found.get("losses") or {}).items()}
        return nan_line(bad, task_versions(run))
    except (ConsoleError, ValueError, TypeError):
        return ""
