"""How a run's tasks are started, inspected and stopped: one ``Engine`` per kind of cluster.

``direct.HostsEngine`` starts tasks itself over SSH or as local processes. ``slurm.SlurmEngine``
hands them to Slurm. Which one a run uses follows from its saved cluster (``kind: slurm``,
``backend.config.kinds``); nothing above ``Run`` knows which one it talks to. A kind of cluster
registers its engine here (``register``): how it is made and how a launch checks it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from backend.config import jobfit, kinds
from backend.errors import SpecError
from backend.hosts.pool import Pool
from backend.hosts.preflight import require_preflight
from backend.hosts.resolve import tf_hosts
from backend.records import project
from backend.config.slurm_spec import SlurmSpec
from backend.config.spec import ClusterSpec, JobSpec


@dataclass(frozen=True)
class EngineKind:
    spec: type                                          # the spec class of its kind (config.kinds)
    make: Callable[[Pool, Any], Any]                    # the engine a saved cluster of it gets
    # Checks before anything starts (raise to refuse): preflight's reports, [] when it has none.
    prepare: Callable[[Any, JobSpec, Pool, bool], list]


ENGINES: dict[type, EngineKind] = {}


def register(kind: EngineKind) -> None:
    ENGINES[kind.spec] = kind


def _kind_of(cluster) -> EngineKind:
    for t in type(cluster).__mro__:
        if t in ENGINES:
            return ENGINES[t]
    raise TypeError(f"no engine is registered for {type(cluster).__name__}")


def prepare(cluster, job: JobSpec, pool: Pool, *, preflight: bool) -> tuple[dict, ClusterSpec, list]:
    """Check a cluster for ``job`` the way its kind is checked, before anything starts: the run's
    saved cluster, its tasks as a ``ClusterSpec``, and preflight's reports."""
    checked = _kind_of(cluster).prepare(cluster, job, pool, preflight)
    return kinds.any_cluster_to_dict(cluster), cluster.as_cluster(), checked


def tasks_view(saved_cluster: dict) -> ClusterSpec:
    """The run's tasks as a ``ClusterSpec``: a Slurm run's are reached through its login host."""
    return kinds.any_cluster_from_dict(saved_cluster).as_cluster()


def engine_for(saved_cluster: dict, pool: Pool):
    cluster = kinds.any_cluster_from_dict(saved_cluster)
    return _kind_of(cluster).make(pool, cluster)


def _prepare_hosts(cluster: ClusterSpec, job: JobSpec, pool: Pool, preflight: bool) -> list:
    """Our hosts: the job's fit with the addresses the workers will dial, then preflight
    (``preflight=False``: the caller has just run it)."""
    jobfit.require_valid(cluster, job, hosts=tf_hosts(cluster, pool.options.ssh_config))
    # Checked on every host's Python too, unless the job asked to have them installed there.
    wanted = () if job.pip_install else project.requirements(job.project)
    return require_preflight(cluster, pool, wanted) if preflight else []


def _prepare_slurm(cluster: SlurmSpec, job: JobSpec, pool: Pool, preflight: bool) -> list:
    """Slurm: the fit alone; ``sbatch`` makes its own checks and refuses with Slurm's message."""
    jobfit.require_valid(cluster, job)
    if job.pip_install:
        raise SpecError("pip_install", "installs into our hosts' Python; a Slurm job runs in the "
                        "cluster's own environment", "Install the project's requirements in the "
                        "Python the cluster's nodes use (a venv on the shared disk), and remove pip_install.")
    return []


def _hosts_engine(pool: Pool, cluster: ClusterSpec):
    from backend.engines.direct import HostsEngine
    return HostsEngine(pool)


def _slurm_engine(pool: Pool, cluster: SlurmSpec):
    from backend.engines.slurm import SlurmEngine
    return SlurmEngine(pool, cluster)


register(EngineKind(ClusterSpec, _hosts_engine, _prepare_hosts))
register(EngineKind(SlurmSpec, _slurm_engine, _prepare_slurm))
