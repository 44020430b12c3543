"""Preflight: check every host in parallel before a launch, and say why each one fails."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from backend.errors import ConsoleError, HostError
from backend.hosts.pool import Pool, parallel
from backend.hosts.resolve import tf_addresses
from backend.config.spec import ClusterSpec, TaskSpec

PROBE = (Path(__file__).resolve().parents[1] / "harness" / "probe.py").read_text()
CHECKS = ("ssh", "python", "tensorflow", "gpus", "port", "workdir", "peers")


@dataclass
class HostReport:
    task: str
    host: str
    checks: dict[str, dict] = field(default_factory=dict)  # check -> {"ok": bool, ...}

    @property
    def ok(self) -> bool:
        return all(c.get("ok") for c in self.checks.values())

    def problems(self) -> list[str]:
        return [f"{name}: {c.get('error', 'failed')}" for name, c in self.checks.items()
                if not c.get("ok")]

    def row(self) -> dict:
        """One table row: a cell per check, '✓ detail' or '✗ reason'."""
        cells = {"task": self.task, "host": self.host}
        for name in CHECKS:
            c = self.checks.get(name)
            if c is None:
                cells[name] = "–"
            elif c.get("ok"):
                cells[name] = "ok " + _detail(name, c)
            else:
                cells[name] = "FAIL " + c.get("error", "")
        return cells


def _detail(name: str, check: dict) -> str:
    if name == "tensorflow":
        return f"{check['tensorflow']} (keras {check['keras']})"
    if name == "python":
        return check.get("version", "")
    if name == "peers":
        return f"{check['peers']} reachable"
    if name == "gpus":
        return f"{len(check['gpus'])} GPU(s)" if check["gpus"] else "none (CPU)"
    return ""


def probe(pool: Pool, name: str, task: TaskSpec, peers: list[tuple[str, str]] = ()) -> HostReport:
    """Check one task's host; ``peers``: (name, TF_CONFIG address) of every other task."""
    report = HostReport(name, task.host)
    try:
        result = pool.transport(task).run(
            [task.python, "-c", PROBE, "--port", str(task.tf_port), "--workdir", task.workdir,
             "--peers", json.dumps(list(peers))], timeout=180)
    except HostError as err:
        report.checks["ssh"] = {"ok": False, "error": f"{err.problem} {err.fix}".strip()}
        return report
    report.checks["ssh"] = {"ok": True}
    lines = result.stdout.strip().splitlines()
    if result.exit_code != 0 or not lines:
        missing = result.exit_code == 127 or "No such file" in result.stderr
        report.checks["python"] = {"ok": False, "error": (
            f"{task.python} not found; set the task's Python to a path that exists on the host"
            if missing else (result.stderr.strip().splitlines() or ["no output"])[-1])}
        return report
    report.checks.update(json.loads(lines[-1]))
    return report


def run_preflight(cluster: ClusterSpec, pool: Pool) -> list[HostReport]:
    names = cluster.task_names()
    addresses = dict(zip(names, tf_addresses(cluster, pool.options.ssh_config)))
    results = parallel(lambda item: probe(pool, *item),
                       [(n, (n, t, [(m, a) for m, a in addresses.items() if m != n]))
                        for n, t in zip(names, cluster.tasks)])
    reports = []
    for name, task in zip(names, cluster.tasks):
        r = results[name]
        if isinstance(r, Exception):  # a bug in the probe itself must still name the host
            r = HostReport(name, task.host, {"ssh": {"ok": False, "error": str(r)}})
        reports.append(r)
    _check_versions_match(reports)
    return reports


def _check_versions_match(reports: list[HostReport]) -> None:
    """Every host must run the same TensorFlow; mark the ones that differ from the majority."""
    versions = {r.task: r.checks["tensorflow"]["tensorflow"] for r in reports
                if r.checks.get("tensorflow", {}).get("ok")}
    if len(set(versions.values())) <= 1:
        return
    common = max(set(versions.values()), key=list(versions.values()).count)
    for r in reports:
        v = versions.get(r.task)
        if v and v != common:
            r.checks["tensorflow"] = {**r.checks["tensorflow"], "ok": False, "error":
                                      f"TensorFlow {v} differs from {common} on the other hosts; "
                                      "install the same version everywhere"}


class PreflightFailed(ConsoleError):
    def __init__(self, reports: list[HostReport]) -> None:
        self.reports = reports
        bad = [f"{r.task} ({r.host}): " + "; ".join(r.problems()) for r in reports if not r.ok]
        super().__init__("Preflight failed, nothing was started. " + " | ".join(bad),
                         "Fix each host above, then launch again.")


def require_preflight(cluster: ClusterSpec, pool: Pool) -> list[HostReport]:
    reports = run_preflight(cluster, pool)
    if not all(r.ok for r in reports):
        raise PreflightFailed(reports)
    return reports
