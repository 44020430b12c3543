"""The TF_CONFIG document itself: built from addresses per role, and read back. Standard library only.

One builder for both ways a task learns its place: ``backend.config.tfconfig`` calls it with the
addresses of a cluster file (SSH hosts), and ``slurm_task.py`` calls it on the node with the
addresses it reads from Slurm's variables. One reader, ``place``, for every job kind: the harness
(``loop.cluster_from_env``) and the client library (``context.from_env``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from . import layout

# TensorFlow lists chief and workers in "cluster"; an evaluator only learns its own task entry.
LISTED_ROLES = ("chief", "worker")


def build(addresses: dict[str, list[str]], task_type: str, index: int) -> dict:
    """``{"cluster": {role: [host:port, ...]}, "task": {"type": ..., "index": ...}}``."""
    listed = {role: list(addresses.get(role, [])) for role in LISTED_ROLES}
    return {"cluster": {role: addrs for role, addrs in listed.items() if addrs},
            "task": {"type": task_type, "index": index}}


@dataclass(frozen=True)
class Place:
    """Where a task stands in its cluster, by MultiWorkerMirroredStrategy's rule."""
    role: str            # "chief", "worker" (or whatever else TF_CONFIG says)
    task: str            # this task's name, e.g. "worker-1"
    tasks: tuple         # every listed task's name, chief first
    is_chief: bool

    @property
    def task_index(self) -> int:
        return self.tasks.index(self.task)


def place(tf_config: str | None) -> Place:
    """Read a TF_CONFIG; none means a single worker called ``worker-0``."""
    cfg = json.loads(tf_config or "{}")
    spec = cfg.get("cluster") or {}
    task = cfg.get("task") or {"type": "worker", "index": 0}
    role, index = task.get("type", "worker"), int(task.get("index", 0))
    tasks = tuple(layout.task_name(r, i) for r in LISTED_ROLES
                  for i in range(len(spec.get(r, [])))) or ("worker-0",)
    # Without a chief entry, worker 0 is the chief.
    is_chief = role == "chief" or (role == "worker" and index == 0 and not spec.get("chief"))
    return Place(role=role, task=layout.task_name(role, index), tasks=tasks, is_chief=is_chief)
