"""How a run's tasks are started, inspected and stopped: one ``Engine`` per kind of cluster.

``direct.HostsEngine`` starts tasks itself over SSH or as local processes. ``slurm.SlurmEngine``
hands them to Slurm. Which one a run uses follows from its saved cluster (``kind: slurm``);
nothing above ``Run`` knows which one it talks to.
"""
from __future__ import annotations

from backend.config import jobfit
from backend.errors import SpecError
from backend.hosts.pool import Pool
from backend.hosts.preflight import require_preflight
from backend.hosts.resolve import tf_hosts
from backend.records import project
from backend.config.slurm_spec import SlurmSpec, any_cluster_from_dict, slurm_to_dict
from backend.config.spec import ClusterSpec, JobSpec, cluster_to_dict


def prepare(cluster, job: JobSpec, pool: Pool, *, preflight: bool) -> tuple[dict, ClusterSpec, list]:
    """Check a cluster for ``job`` the way its kind is checked, before anything starts: the run's
    saved cluster, its tasks as a ``ClusterSpec``, and preflight's reports. Our hosts: the job's
    fit with the addresses the workers will dial, then preflight (``preflight=False``: the caller
    has just run it). Slurm: the fit alone; ``sbatch`` makes its own checks and refuses with
    Slurm's message."""
    if isinstance(cluster, SlurmSpec):
        jobfit.require_valid(cluster, job)
        if job.pip_install:
            raise SpecError("pip_install", "installs into our hosts' Python; a Slurm job runs in the "
                            "cluster's own environment", "Install the project's requirements in the "
                            "Python the cluster's nodes use (a venv on the shared disk), and remove pip_install.")
        return slurm_to_dict(cluster), cluster.as_cluster(), []
    jobfit.require_valid(cluster, job, hosts=tf_hosts(cluster, pool.options.ssh_config))
    # Checked on every host's Python too, unless the job asked to have them installed there.
    wanted = () if job.pip_install else project.requirements(job.project)
    return cluster_to_dict(cluster), cluster, require_preflight(cluster, pool, wanted) if preflight else []


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
