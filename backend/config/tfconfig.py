"""TF_CONFIG for every task (pure functions of the cluster spec) and the checks that need the whole
cluster at once. No I/O: the launcher decides when to refuse, the console shows the findings.
"""
from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import dataclass, field
from typing import Literal, Sequence

from backend.errors import SpecError, SpecErrors
from backend.client.harness.contract import tf_config_doc
from backend.config.spec import ClusterSpec, Role, TransportKind

# TensorFlow lists chief and workers in "cluster"; an evaluator only learns its own task entry.
_LISTED_ROLES = (Role.CHIEF, Role.WORKER)
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def tf_config(cluster: ClusterSpec, task_position: int, addresses: Sequence[str] | None = None) -> dict:
    """TF_CONFIG for ``cluster.tasks[task_position]``.

    ``addresses`` holds each task's ``host:port`` as the workers dial it, in task order
    (``backend.hosts.resolve.tf_addresses``: an alias becomes its HostName); without it the hosts
    are taken as written.
    """
    indexed = cluster.indexed()
    if isinstance(task_position, bool) or not isinstance(task_position, int) \
            or not 0 <= task_position < len(indexed):
        raise SpecError("task_position", f"no task at position {task_position!r}",
                        f"Use a position from 0 to {len(indexed) - 1}.")
    task, index = indexed[task_position]
    addrs = list(addresses) if addresses is not None else [t.endpoint for t in cluster.tasks]
    listed = {role.value: [a for t, a in zip(cluster.tasks, addrs) if t.role is role] for role in _LISTED_ROLES}
    return tf_config_doc.build(listed, task.role.value, index)


def all_tf_configs(cluster: ClusterSpec, addresses: Sequence[str] | None = None) -> dict[str, dict]:
    names = cluster.task_names()
    return {names[i]: tf_config(cluster, i, addresses) for i in range(len(names))}


def export_lines(cluster: ClusterSpec, addresses: Sequence[str] | None = None) -> dict[str, str]:
    """Shell lines an operator can paste to start a task by hand."""
    return {name: "export TF_CONFIG=" + shlex.quote(json.dumps(cfg, separators=(",", ":")))
            for name, cfg in all_tf_configs(cluster, addresses).items()}


def address_rows(cluster: ClusterSpec, addresses: Sequence[str]) -> list[dict]:
    """One row per task: its name, the host as written and the address its peers dial."""
    return [{"task": n, "host": t.endpoint, "address": a}
            for n, t, a in zip(cluster.task_names(), cluster.tasks, addresses)]


@dataclass(frozen=True)
class Finding:
    level: Literal["error", "warning", "info"]
    field: str
    message: str  # ends with what to do
    # Kept apart so require_valid can rebuild a SpecError without re-parsing the message.
    problem: str = field(default="", compare=False, repr=False)
    fix: str = field(default="", compare=False, repr=False)


def finding(level: str, where: str, problem: str, fix: str = "") -> Finding:
    return Finding(level, where, f"{problem}. {fix}".strip(), problem=problem, fix=fix)


def _is_loopback(host: str) -> bool:
    # RFC 6761 reserves every name under .localhost for the loopback interface.
    if host.lower() in _LOOPBACK_NAMES or host.lower().rstrip(".").endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_key(host: str) -> str:
    """One spelling per address, so "::1" and "0:0::1" or "Node1" and "node1" compare equal."""
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host.lower()


def _check_roles(cluster: ClusterSpec) -> list[Finding]:
    out = []
    chiefs = [i for i, t in enumerate(cluster.tasks) if t.role is Role.CHIEF]
    workers = [t for t in cluster.tasks if t.role is Role.WORKER]
    evaluators = [i for i, t in enumerate(cluster.tasks) if t.role is Role.EVALUATOR]
    for i in chiefs[1:]:
        out.append(finding("error", f"tasks[{i}].role", f"{len(chiefs)} tasks are chief",
                            "Make exactly one task the chief and the others workers."))
    if not chiefs and not workers:
        out.append(finding("error", "tasks", "the cluster has no chief and no worker",
                            "Add at least one worker (or a chief) task."))
    elif not chiefs:
        out.append(finding("info", "tasks", f"no chief: worker 0 ({workers[0].endpoint}) acts as chief"))
    for i in evaluators[1:]:
        out.append(finding("warning", f"tasks[{i}].role", "TensorFlow runs a single evaluator",
                            "Keep one evaluator task and make the others workers."))
    return out


def _check_ports(cluster: ClusterSpec, names: list[str], hosts: Sequence[str]) -> list[Finding]:
    """Ranges again (a spec built around __post_init__ could skip them) and collisions."""
    out = []
    by_address: dict[tuple[str, int], int] = {}
    local_ports: dict[int, int] = {}
    for i, task in enumerate(cluster.tasks):
        if not _is_int_in(task.tf_port, 1024, 65535):
            out.append(finding("error", f"tasks[{i}].tf_port", f"tf_port {task.tf_port!r} is out of range",
                                "Use a port from 1024 to 65535."))
        if task.ssh_port is not None and not _is_int_in(task.ssh_port, 1, 65535):
            out.append(finding("error", f"tasks[{i}].ssh_port", f"ssh_port {task.ssh_port!r} is out of range",
                                "Use a port from 1 to 65535."))
        key = (_host_key(hosts[i]), task.tf_port)
        if key in by_address:
            j = by_address[key]
            out.append(finding("error", f"tasks[{i}].tf_port",
                                f"{names[j]} and {names[i]} both use {task.endpoint}",
                                "Give each task on the same host its own tf_port."))
        else:
            by_address[key] = i
            # Local tasks share this machine whatever address they name, so a port can serve only one.
            if task.transport is TransportKind.LOCAL and task.tf_port in local_ports:
                j = local_ports[task.tf_port]
                out.append(finding("error", f"tasks[{i}].tf_port",
                                    f"{names[j]} and {names[i]} both run on this machine on port {task.tf_port}",
                                    "Give each local task its own tf_port."))
        if task.transport is TransportKind.LOCAL:
            local_ports.setdefault(task.tf_port, i)
    return out


def _is_int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_loopback(cluster: ClusterSpec, hosts: Sequence[str]) -> list[Finding]:
    loop = [i for i, h in enumerate(hosts) if _is_loopback(h)]
    if not loop or len(loop) == len(cluster.tasks):
        return []
    remote = next(h for h in hosts if not _is_loopback(h))
    return [finding("error", f"tasks[{i}].host",
                     f"{hosts[i]} is a loopback address, so remote hosts such as {remote} "
                     "could not reach this task",
                     "Use an address the other hosts can route to (this machine's LAN name or IP).")
            for i in loop]


def _check_gpus(cluster: ClusterSpec, names: list[str], hosts: Sequence[str]) -> list[Finding]:
    out, owner = [], {}
    for i, task in enumerate(cluster.tasks):
        machine = "this machine" if task.transport is TransportKind.LOCAL else _host_key(hosts[i])
        for gpu in task.gpus:
            if (machine, gpu) in owner:
                out.append(finding("warning", f"tasks[{i}].gpus",
                                    f"{names[owner[machine, gpu]]} and {names[i]} share GPU {gpu}",
                                    "Give each task on a host its own GPUs, or expect them to compete for memory."))
            owner.setdefault((machine, gpu), i)
    return out


def check_cluster(cluster: ClusterSpec, hosts: Sequence[str] | None = None) -> list[Finding]:
    """Every problem with the cluster as a whole: errors first, then warnings, then info.

    ``hosts``: each task's host as its peers reach it (``resolve.tf_hosts``), so an alias and
    its HostName count as one machine; without it the hosts are taken as written.
    """
    names = cluster.task_names()
    hosts = list(hosts) if hosts is not None else [t.address or t.host for t in cluster.tasks]
    found = (_check_roles(cluster) + _check_ports(cluster, names, hosts) + _check_loopback(cluster, hosts)
             + _check_gpus(cluster, names, hosts) + _check_spares(cluster, hosts))
    return sort_findings(found)


def _check_spares(cluster: ClusterSpec, hosts: Sequence[str]) -> list[Finding]:
    """A spare stands in for a host that is gone: one on a task's own host would go with it, and
    two spares at one host:port could not both take a task."""
    out, taken = [], {_host_key(h) for h in hosts}
    training = sum(t.role in _LISTED_ROLES for t in cluster.tasks)
    if cluster.min_workers is not None and not 1 <= cluster.min_workers < training:
        out.append(finding("warning", "min_workers", f"min_workers {cluster.min_workers} leaves no room to "
                            f"shrink a cluster of {training} chief/worker task(s)",
                            f"Set min_workers from 1 to {max(training - 1, 1)}, or remove it."))
    seen: set[tuple[str, int]] = set()
    for i, spare in enumerate(cluster.spares):
        key = (_host_key(spare.address or spare.host), spare.tf_port)
        if key in seen:
            out.append(finding("error", f"spares[{i}].tf_port", f"two spares use {spare.endpoint}",
                                "Give each spare on one host its own tf_port."))
        seen.add(key)
        if key[0] in taken:
            out.append(finding("warning", f"spares[{i}].host",
                                f"spare {spare.host} is also a task's host, so losing that host loses the spare too",
                                "List a host that runs no task as the spare."))
    return out


def sort_findings(found: list[Finding]) -> list[Finding]:
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(found, key=lambda f: order[f.level])


def require_valid(cluster: ClusterSpec, *, hosts: Sequence[str] | None = None,
                  more: Sequence[Finding] = ()) -> None:
    """Raise SpecErrors built from the error-level findings (the cluster's, plus ``more``: what a
    job needs of it, from ``backend.config.jobfit``), so nothing starts that must fail."""
    raise_errors(check_cluster(cluster, hosts) + list(more))


def raise_errors(found: Sequence[Finding]) -> None:
    """SpecErrors of the error-level findings, if any."""
    errors = [SpecError(f.field, f.problem or f.message.rstrip("."), f.fix) for f in found if f.level == "error"]
    if errors:
        raise SpecErrors(errors)
