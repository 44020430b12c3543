"""The TF_CONFIG document itself, from addresses per role. Standard library only.

One builder for both ways a task learns its place: ``backend.config.tfconfig`` calls it with the
addresses of a cluster file (SSH hosts), and ``slurm_task.py`` calls it on the node with the
addresses it reads from Slurm's variables.
"""
from __future__ import annotations

# TensorFlow lists chief and workers in "cluster"; an evaluator only learns its own task entry.
LISTED_ROLES = ("chief", "worker")


def build(addresses: dict[str, list[str]], task_type: str, index: int) -> dict:
    """``{"cluster": {role: [host:port, ...]}, "task": {"type": ..., "index": ...}}``."""
    listed = {role: list(addresses.get(role, [])) for role in LISTED_ROLES}
    return {"cluster": {role: addrs for role, addrs in listed.items() if addrs},
            "task": {"type": task_type, "index": index}}
