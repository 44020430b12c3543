"""Where a run's tasks live: grouped by host connection and run folder, each as a ``remote.Host``.

Several tasks on one host in one run folder are served by one host command, not one per task:
starting, status, stop and stacks ask each group once, all groups at once (``pool.parallel``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from backend.config.spec import ClusterSpec, TaskSpec
from backend.hosts import remote
from backend.hosts.pool import Pool, connection_key


class TaskPlace(Protocol):
    """A task as the run's record places it (``backend.records.state.TaskState`` is one)."""
    name: str
    position: int          # index into the cluster's tasks
    host: str
    remote_run_dir: str


class RunOnHosts(Protocol):
    """What reaching a run's tasks reads of a run; ``backend.runs.handle.Run`` is one."""
    cluster: ClusterSpec
    pool: Pool
    state: Any             # the run's record: ``tasks``, ``chief``, ``live``

    @property
    def local_dir(self) -> Path: ...

    def task(self, name: str) -> TaskPlace: ...


@dataclass(frozen=True)
class HostGroup:
    """Tasks that share one connection and one run folder: one host command serves them all."""
    spec: TaskSpec                  # the first task's: its host, transport and Python
    run_dir: str
    tasks: tuple[TaskPlace, ...]

    @property
    def name(self) -> str:
        """The group's name in ``parallel``'s answers: its first task's."""
        return self.tasks[0].name

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def host(self, pool: Pool) -> remote.Host:
        return remote.Host(pool.transport(self.spec), self.spec.python, self.run_dir)


def by_host(tasks: Sequence[TaskPlace], cluster: ClusterSpec) -> list[HostGroup]:
    """The tasks grouped per connection and run folder, in the order of their first task."""
    groups: dict[tuple, list[TaskPlace]] = {}
    for t in tasks:
        groups.setdefault(place(t, cluster), []).append(t)
    return [HostGroup(cluster.tasks[g[0].position], g[0].remote_run_dir, tuple(g)) for g in groups.values()]


def place(task: TaskPlace, cluster: ClusterSpec) -> tuple:
    """Tasks with the same place share a group: the same connection and the same run folder."""
    return (*connection_key(cluster.tasks[task.position]), task.remote_run_dir)


def task_host(pool: Pool, cluster: ClusterSpec, task: TaskPlace) -> remote.Host:
    """The host command line in one task's run folder."""
    spec = cluster.tasks[task.position]
    return remote.Host(pool.transport(spec), spec.python, task.remote_run_dir)
