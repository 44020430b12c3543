"""Preflight: check every host in parallel before a launch, and say why each one fails.

One probe per host and Python, whatever the number of tasks there (one per task made a
32-task preflight 12x a 2-task one): it checks every task's port and working folder, and dials
each peer host once, not each peer task (``peer_targets``). Each task still gets its own report.
"""
from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement

from backend.errors import ConsoleError, HostError
from backend.hosts.pool import Pool, connection_key, parallel
from backend.hosts.resolve import tf_addresses
from backend.config.spec import ClusterSpec, TaskSpec

PROBE = (Path(__file__).resolve().parents[1] / "client" / "harness" / "probe.py").read_text()
CHECKS = ("ssh", "login", "python", "tensorflow", "gpus", "port", "workdir", "peers", "packages")
# What a login costs: every host command goes through the user's login shell, which runs its
# startup files first (bash run by sshd reads ~/.bashrc even for a command). `conda init`,
# `module load` or a `pyenv init` waiting on a stale lock there cost seconds per command, and
# every short host command (status, metrics, Save now) then times out without naming why.
LOGIN_SLOW_S = 1.0        # a command slower than this to start is named, with the fix
LOGIN_LIMIT_S = 20.0      # past this, the check fails: the console's short commands would time out
STARTUP_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshenv", ".zshrc", ".cshrc", ".tcshrc")
# Says the login shell and which startup files exist; its time is the login's (nothing else runs).
LOGIN_PROBE = ('echo "${SHELL:-?}"; for f in ' + " ".join(STARTUP_FILES)
               + '; do [ -f "$HOME/$f" ] && echo "$f"; done; true')
EARLY_RETURN = ("return early for non-interactive shells: put `case $- in *i*) ;; *) return;; esac` "
                "at the top of ~/.bashrc (before conda init, module load or pyenv init), or move "
                "those lines into ~/.bash_profile, which a command does not read")


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

    def versions(self) -> dict:
        """What the run's record keeps of this task's host (``record.host_part``)."""
        python, tf = self.checks.get("python", {}), self.checks.get("tensorflow", {})
        found = {"host": self.host, "python": python.get("version"), "tensorflow": tf.get("tensorflow"),
                 "keras": tf.get("keras")}
        return {k: v for k, v in found.items() if v} if python.get("ok") else {}


def _detail(name: str, check: dict) -> str:
    if name == "tensorflow":
        return f"{check['tensorflow']} (keras {check['keras']})"
    if name == "python":
        return check.get("version", "")
    if name == "peers":
        return f"{check['peers']} reachable"
    if name == "gpus":
        return f"{len(check['gpus'])} GPU(s)" if check["gpus"] else "none (CPU)"
    if name == "packages":
        return f"{len(check.get('installed') or {})} required, all there"
    if name == "login":
        return f"{check['seconds']:.2f} s" + (f"; SLOW: {check['slow']}" if check.get("slow") else "")
    return ""


def login_check(transport) -> dict:
    """What starting one command costs on the host (the quicker of two, so the connection's own
    set-up is not counted), and, when slow, the shell's startup files that ran and the fix."""
    took, out = [], ""
    for _ in range(2):
        began = time.monotonic()
        try:
            out = transport.run(["sh", "-c", LOGIN_PROBE], timeout=LOGIN_LIMIT_S).stdout
        except HostError as err:
            if "timed out" not in err.problem:
                raise
            return {"ok": False, "seconds": LOGIN_LIMIT_S, "error": (
                f"a command did not even start within {LOGIN_LIMIT_S:g} s: the login shell's startup "
                f"files run before every command; {EARLY_RETURN}; time it with `ssh HOST true`")}
        took.append(time.monotonic() - began)
    seconds = min(took)
    found = {"ok": True, "seconds": round(seconds, 3)}
    if seconds >= LOGIN_SLOW_S:
        lines = out.split()
        shell, files = (lines[0] if lines else "?"), [f"~/{f}" for f in lines[1:]]
        found["slow"] = (f"each command costs {seconds:.1f} s to start; the login shell ({shell}) runs "
                         f"{', '.join(files) or 'its startup files'} first; {EARLY_RETURN}")
    return found


def _address_host(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def peer_targets(names: list[str], addresses: dict[str, str]) -> dict[str, tuple[str, str]]:
    """What one host's probe dials for its tasks ``names``: one (task, address) per peer host,
    keyed by that host (the first task there stands for it). A peer host is reachable from a
    host whichever of the host's tasks dials it, so no pair of tasks is dialled twice."""
    out: dict[str, tuple[str, str]] = {}
    for peer, address in addresses.items():
        if any(peer != name for name in names):   # some task here dials it
            out.setdefault(_address_host(address), (peer, address))
    return out


def _peers_check(name: str, addresses: dict[str, str], targets: dict[str, tuple[str, str]],
                 found: dict) -> dict:
    """Task ``name``'s peers check from its host's dials: the failures of the hosts it dials."""
    others = [m for m in addresses if m != name]
    failed = found.get("failed") or {}
    problems = []
    for host in dict.fromkeys(_address_host(addresses[m]) for m in others):
        stand_in = targets[host][0]
        if stand_in in failed:
            more = sum(1 for m in others if _address_host(addresses[m]) == host and m != stand_in)
            problems.append(failed[stand_in] + (f" (and {more} more task(s) there)" if more else ""))
    if problems:
        return {"ok": False, "error": "cannot reach " + " | ".join(problems)}
    return {"ok": True, "peers": len(others)}


def packages_check(wanted: list[Requirement], installed: dict, python: str) -> dict:
    """The project's requirements against what the host's Python has: each one missing or at
    another version, and the command that fixes them (run by the operator: nothing is installed)."""
    wrong = []
    for req in wanted:
        have = installed.get(req.name)
        if have is None:
            wrong.append((req, f"{req.name} missing"))
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            wrong.append((req, f"{req.name} {have} (asked: {req.specifier})"))
    if not wrong:
        return {"ok": True, "installed": installed}
    fix = " ".join(shlex.quote(str(r)) for r, _ in wrong)
    return {"ok": False, "installed": installed,
            "error": f"{'; '.join(w for _, w in wrong)}; install them: {python} -m pip install {fix}"}


def probe_host(pool: Pool, tasks: list[tuple[str, TaskSpec]], addresses: dict[str, str],
               wanted: list[Requirement] = ()) -> dict[str, HostReport]:
    """Check one host for ``tasks`` (name, spec; one transport and Python) in one command."""
    spec = tasks[0][1]
    targets = peer_targets([n for n, _ in tasks], addresses)
    argv = [spec.python, "-c", PROBE, "--peers", json.dumps(list(targets.values())),
            "--packages", json.dumps(sorted({r.name for r in wanted}))]
    for _, t in tasks:
        argv += ["--port", str(t.tf_port), "--workdir", t.workdir]
    reports = {name: HostReport(name, t.host) for name, t in tasks}
    try:
        login = login_check(pool.transport(spec))
        if not login["ok"]:   # the probe would wait as long again, for nothing more
            for r in reports.values():
                r.checks.update(ssh={"ok": True}, login=login)
            return reports
        result = pool.transport(spec).run(argv, timeout=180)
    except HostError as err:
        for r in reports.values():
            r.checks["ssh"] = {"ok": False, "error": f"{err.problem} {err.fix}".strip()}
        return reports
    lines = result.stdout.strip().splitlines()
    for name, t in tasks:
        checks = reports[name].checks
        checks["ssh"], checks["login"] = {"ok": True}, login
        if result.exit_code != 0 or not lines:
            missing = result.exit_code == 127 or "No such file" in result.stderr
            checks["python"] = {"ok": False, "error": (
                f"{t.python} not found; set the task's Python to a path that exists on the host"
                if missing else (result.stderr.strip().splitlines() or ["no output"])[-1])}
            continue
        found = json.loads(lines[-1])
        checks.update({k: found[k] for k in ("python", "tensorflow", "gpus")})
        checks["port"] = found["ports"][str(t.tf_port)]
        checks["workdir"] = found["workdirs"][t.workdir]
        checks["peers"] = _peers_check(name, addresses, targets, found["peers"])
        if wanted:
            checks["packages"] = packages_check(wanted, found["packages"]["installed"], t.python)
    return reports


def run_preflight(cluster: ClusterSpec, pool: Pool, requirements: tuple[str, ...] = ()) -> list[HostReport]:
    """Every host's checks; ``requirements`` (a project's requirements.txt lines) are checked
    against each host's Python too."""
    wanted = [Requirement(line) for line in requirements]
    names = cluster.task_names()
    addresses = dict(zip(names, tf_addresses(cluster, pool.options.ssh_config)))
    hosts: dict[tuple, list[tuple[str, TaskSpec]]] = {}
    for name, task in zip(names, cluster.tasks):   # one probe per connection and Python
        hosts.setdefault((*connection_key(task), task.python), []).append((name, task))
    results = parallel(lambda group: probe_host(pool, group, addresses, wanted),
                       [(group[0][0], group) for group in hosts.values()])
    reports = []
    for group in hosts.values():
        found = results[group[0][0]]
        for name, task in group:
            if isinstance(found, Exception):  # a bug in the probe itself must still name the host
                reports.append(HostReport(name, task.host, {"ssh": {"ok": False, "error": str(found)}}))
            else:
                reports.append(found[name])
    order = {name: i for i, name in enumerate(names)}
    reports.sort(key=lambda r: order[r.task])
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


def require_preflight(cluster: ClusterSpec, pool: Pool, requirements: tuple[str, ...] = ()) -> list[HostReport]:
    reports = run_preflight(cluster, pool, requirements)
    if not all(r.ok for r in reports):
        raise PreflightFailed(reports)
    return reports
