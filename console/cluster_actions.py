"""Cluster page actions: imports, YAML and TF_CONFIG output, preflight and host-key trust, as
plain results (``console.ui.host_checks`` draws the preflight and the host key)."""
from __future__ import annotations

import os

import yaml

from backend.config import tfconfig
from backend.errors import ConsoleError
from backend.hosts.pool import Pool
from backend.hosts.known_hosts import OnChange
from backend.hosts.resolve import tf_addresses
from backend.hosts.ssh import SSHOptions
from backend.hosts.trust import fetch_host_key
from backend.access import audit
from backend.runs.store import default_root
from backend.hosts.preflight import run_preflight
from backend.config.spec import (ClusterSpec, TransportKind, cluster_from_dict, cluster_to_dict, import_hostfile,
                          import_ssh_config, load_yaml_text, save_cluster)
from console import forms


# ---- imports and output ---------------------------------------------------------------------

def _rows(cluster: ClusterSpec) -> list[dict]:
    return forms.cluster_rows(cluster_to_dict(cluster))


def import_yaml(raw: bytes, name: str = "the uploaded file") -> list[dict]:
    """Table rows from an uploaded cluster YAML; raises SpecError / SpecErrors for bad content
    (the backend's loader bounds size, depth and aliases, as for a file launched from the CLI)."""
    return _rows(cluster_from_dict(load_yaml_text(raw, name)))


def import_hosts(text: str, tf_port: int) -> list[dict]:
    """Table rows from a hostfile ("host slots=N" per line, or bare host names)."""
    return _rows(import_hostfile(text, tf_port=int(tf_port)))


def ssh_aliases(path: str) -> list[str]:
    """Concrete Host aliases of an ssh_config file ("~" expanded); [] if the file does not exist."""
    return import_ssh_config(os.path.expanduser(path))


def cluster_yaml(cluster: ClusterSpec) -> str:
    return yaml.safe_dump(cluster_to_dict(cluster), sort_keys=False)


def save_yaml(cluster: ClusterSpec, path: str) -> None:
    """Write the cluster YAML; raises ConsoleError when the path is not writable."""
    try:
        save_cluster(cluster, path)
    except OSError as err:
        raise ConsoleError(f"could not write {path}: {err.strerror or err}.",
                           "Choose a writable path.") from None


def addresses(cluster: ClusterSpec, options: SSHOptions) -> list[str]:
    """Each task's ``host:port`` as the workers dial it (an ssh_config alias becomes its HostName)."""
    return tf_addresses(cluster, options.ssh_config)


def address_table(cluster: ClusterSpec, options: SSHOptions) -> list[dict]:
    """Rows of task, host as written and the address in TF_CONFIG: the alias -> address preview."""
    return tfconfig.address_rows(cluster, addresses(cluster, options))


def tf_configs(cluster: ClusterSpec, options: SSHOptions) -> dict[str, dict]:
    """Task name -> its TF_CONFIG, as each worker will get it."""
    return tfconfig.all_tf_configs(cluster, addresses(cluster, options))


def export_script(cluster: ClusterSpec, options: SSHOptions) -> str:
    """A shell script: one commented ``export TF_CONFIG=...`` line per task."""
    lines = tfconfig.export_lines(cluster, addresses(cluster, options))
    return "\n".join(f"# {n}\n{line}" for n, line in lines.items()) + "\n"


# ---- preflight and host keys ----------------------------------------------------------------

def preflight(cluster: ClusterSpec, options: SSHOptions, *, spares: bool = False,
              requirements: tuple[str, ...] = ()) -> dict:
    """{"rows": table rows, "failures": ["task (host): problem; ..."], "error": text or "",
    "spare_failures": [...]}. ``spares``: check the spare hosts too, in the same round (so their
    TensorFlow is compared with the tasks'); a spare that fails is a warning, not a failure: the
    run can start without it, and the keeper would skip it (backend/runs/membership.py)."""
    checked = ClusterSpec(cluster.tasks + cluster.spares) if spares and cluster.spares else cluster
    try:
        with Pool(options) as pool:
            reports = run_preflight(checked, pool, requirements)
    except ConsoleError as err:
        return {"rows": [], "failures": [], "error": str(err), "spare_failures": []}
    tasks, spare_reports = reports[:len(cluster.tasks)], reports[len(cluster.tasks):]
    for i, report in enumerate(spare_reports):   # named as the Cluster page's spare table numbers them
        report.task = f"spare {i + 1}"
    return {"rows": [r.row() for r in reports], "error": "",
            "failures": [f"{r.task} ({r.host}): " + "; ".join(r.problems()) for r in tasks if not r.ok],
            "spare_failures": [f"{r.task} ({r.host}): " + "; ".join(r.problems())
                               + "; the keeper would skip this spare" for r in spare_reports if not r.ok]}


def ssh_targets(cluster: ClusterSpec) -> list[str]:
    """Distinct SSH hosts as the tasks and spares name them: "alias" or "alias:port" when the task
    sets a port (a spare's key must be trusted before the keeper can move a task there)."""
    out = []
    for task in cluster.tasks + cluster.spares:
        if task.transport is TransportKind.SSH:
            target = task.host if task.ssh_port is None else f"{task.host}:{task.ssh_port}"
            if target not in out:
                out.append(target)
    return out


def _split(target: str) -> tuple[str, int | None]:
    host, colon, port = target.rpartition(":")
    return (host, int(port)) if colon and port.isdigit() and ":" not in host else (target, None)


def fetch_key(target: str, options: SSHOptions) -> dict:
    """The key the host offers now (through ssh_config and jump hosts), for the operator to compare."""
    host, port = _split(target)
    try:
        offered = fetch_host_key(host, port=port, options=options)
    except ConsoleError as err:
        return {"target": target, "error": str(err)}
    return {"target": target, "host": host, "port": port, "label": offered.view.label,
            "fingerprint": offered.fingerprint, "key_type": offered.key.get_name(),
            "verdict": offered.verdict.value, "error": ""}


def trust(info: dict, options: SSHOptions, *, on_change: OnChange = OnChange.REFUSE) -> str:
    """Record the key in known_hosts if it still has the fingerprint shown; raises ConsoleError
    (AccessDenied for anyone but an admin, with a roles file). Recorded in the audit."""
    return audit.trusted_host(default_root(), info["host"], info["fingerprint"], port=info["port"],
                              options=options, on_change=on_change).fingerprint
