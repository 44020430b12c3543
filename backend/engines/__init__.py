"""How a run's tasks are started, inspected and stopped: one ``Engine`` per kind of cluster.

``direct.HostsEngine`` starts tasks itself over SSH or as local processes. ``slurm.SlurmEngine``
hands them to Slurm. Which one a run uses follows from its saved cluster (``kind: slurm``);
nothing above ``Run`` knows which one it talks to.
"""
from __future__ import annotations

from backend.hosts.pool import Pool
from backend.config.slurm_spec import SlurmSpec, any_cluster_from_dict
from backend.config.spec import ClusterSpec


def tasks_view(saved_cluster: dict) -> ClusterSpec:
    """The run's tasks as a ``ClusterSpec``: a Slurm run's are reached through its login host."""
    cluster = any_cluster_from_dict(saved_cluster)
    return cluster.as_cluster() if isinstance(cluster, SlurmSpec) else cluster


def engine_for(saved_cluster: dict, pool: Pool):
    cluster = any_cluster_from_dict(saved_cluster)
    if isinstance(cluster, SlurmSpec):
        from backend.engines.slurm import SlurmEngine
        return SlurmEngine(pool, cluster)
    from backend.engines.direct import HostsEngine
    return HostsEngine(pool)
