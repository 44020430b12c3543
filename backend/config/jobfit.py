"""What a job needs of a cluster, checked before anything starts. Pure: reads only the job file.

A harness job's batch is split evenly over every replica of MultiWorkerMirroredStrategy (one per
GPU a chief or worker task lists, else one per task; on Slurm, one per GPU of each of nodes x
tasks_per_node tasks), so ``global_batch_size`` must divide by the replica count; otherwise every
worker would start, load TensorFlow and fail with the same error.
The value the harness will use is the first of: the job's ``params``, the job module's
``DEFAULTS`` dict, the harness default (``backend.client.harness.jobs.DEFAULTS``).
"""
from __future__ import annotations

import ast
from pathlib import Path

from backend.client.harness.contract import JOB_DEFAULTS as HARNESS_DEFAULTS
from backend.config.slurm_spec import SlurmSpec
from backend.config.spec import ClusterSpec, JobKind, JobSpec, Role
from backend.config.tfconfig import Finding, finding, raise_errors, require_valid as _require_cluster


def replicas(cluster: ClusterSpec | SlurmSpec) -> int:
    """MultiWorkerMirroredStrategy's ``num_replicas_in_sync`` for this cluster."""
    if isinstance(cluster, SlurmSpec):
        return cluster.num_tasks * max(1, cluster.gpus_per_task)
    return sum(max(1, len(t.gpus)) for t in cluster.tasks if t.role in (Role.CHIEF, Role.WORKER))


def module_defaults(path: str | None) -> dict:
    """The literal ``DEFAULTS = {...}`` of a job module, read without running it; {} if none."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8")) if path else None
    except (OSError, SyntaxError, ValueError):
        return {}   # the launch reports an unreadable module on its own
    for node in tree.body if tree else []:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "DEFAULTS" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                return {}
            return dict(value) if isinstance(value, dict) else {}
    return {}


def effective_params(job: JobSpec) -> dict:
    return {**HARNESS_DEFAULTS, **module_defaults(job.module), **dict(job.params)}


def check_job(cluster: ClusterSpec | SlurmSpec, job: JobSpec) -> list[Finding]:
    if job.kind is not JobKind.HARNESS:
        return []   # a command job splits its own batches
    params, n = effective_params(job), replicas(cluster)
    where = "params.global_batch_size" if "global_batch_size" in job.params else "global_batch_size"
    out = []
    gbs = params.get("global_batch_size")
    if isinstance(gbs, int) and not isinstance(gbs, bool) and n and gbs % n:
        lower, upper = max(n, gbs - gbs % n), gbs - gbs % n + n
        out.append(finding("error", where, f"global_batch_size {gbs} is not divisible by the {n} "
                            f"replicas of this cluster ({_per(cluster)})",
                            f"Set params.global_batch_size to a multiple of {n}, e.g. {lower} or {upper}."))
    keep = params.get("keep_checkpoints")
    if isinstance(keep, int) and not isinstance(keep, bool) and keep < 0:
        out.append(finding("error", "keep_checkpoints", f"keep_checkpoints {keep} is negative",
                            "Set params.keep_checkpoints to the number to keep, or 0 to keep all."))
    timeout = params.get("startup_timeout_s")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        out.append(finding("error", "startup_timeout_s", f"startup_timeout_s {timeout!r} is not a "
                            "number of seconds above 0", "Set params.startup_timeout_s to e.g. 30."))
    return out


def _per(cluster: ClusterSpec | SlurmSpec) -> str:
    if isinstance(cluster, SlurmSpec):
        return "nodes x tasks_per_node tasks, times gpus_per_task when it is above 0"
    return "one per chief/worker task, or per GPU it lists"


def require_valid(cluster: ClusterSpec | SlurmSpec, job: JobSpec, *, hosts=None) -> None:
    """Refuse, before anything starts, a cluster with errors or a job that must fail on it. A
    Slurm cluster's own fields were checked when it was read; Slurm places its tasks."""
    if isinstance(cluster, SlurmSpec):
        raise_errors(check_job(cluster, job))
    else:
        _require_cluster(cluster, hosts=hosts, more=check_job(cluster, job))
