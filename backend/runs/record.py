"""What ran: a run's code (module hash, git commit and uncommitted diff), specs, hosts' versions.

Written at launch to ``runs/<id>/record.json`` (owner-only, like the state): the job module's
SHA-256, and where the job's folder is in git, its commit, branch and the diff of uncommitted
changes under that folder (bounded: ``MAX_DIFF`` bytes, untracked files named, not copied).
Each task's Python, TensorFlow and Keras versions come from preflight at launch (when launch ran
it). A harness job's fuller record (CUDA, the chief's installed packages) comes from its
``tasks/<task>.versions.json`` (``harness/nonfinite.py``), read when an attempt ends
(``Run.mirror_logs``; after a stop, off its path: ``runs.aftercare``) or when ``runs show`` looks
at a live run, and kept here, so they outlive the hosts. ``view`` is what the Runs page and
``runs show --json`` show (the job's env values and the webhook masked); ``differences`` is what
two runs' views differ in.
"""
from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import time
from pathlib import Path

from backend.alerts import outbox, settings as alert_settings
from backend.errors import ConsoleError
from backend.access import identity
from backend.records import project
from backend.records.state import RunState
from backend.files import read_dict, write_private

RECORD = "record.json"
MAX_DIFF = 64 * 1024        # bytes of `git diff` kept; a larger diff is cut and says so
MAX_UNTRACKED = 50          # untracked files named
MAX_PACKAGES = 1000
GIT_TIMEOUT_S = 10.0
HOST_KEYS = ("host", "python", "tensorflow", "keras", "cuda")
MASK = "***"


# ---- at launch ------------------------------------------------------------------------------

def build(module: str | None, source: str | None, command: tuple[str, ...] = ()) -> dict:
    """The code part of the record. ``module``: the copy launch keeps (what every attempt runs);
    ``source``: the user's file, whose folder's git state is recorded."""
    found: dict = {"recorded": time.time(), "console": {"python": platform.python_version()}}
    if module:
        data = Path(module).read_bytes()
        found["module"] = {"name": Path(module).name, "sha256": hashlib.sha256(data).hexdigest(),
                           "bytes": len(data)}
    if command:
        found["command"] = list(command)
    if source:
        found["git"] = git_state(Path(source).parent)
    return found


def _git(folder: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    if proc.returncode:
        raise ConsoleError(proc.stderr.decode(errors="replace").strip()[:300] or f"git {args[0]} failed")
    return proc.stdout.decode(errors="replace")


def git_state(folder: Path) -> dict | None:
    """Commit, branch and uncommitted changes of ``folder`` in its git work tree; None outside
    git; {"error": ...} when git does not answer (never a failed launch)."""
    try:
        if _git(folder, "rev-parse", "--is-inside-work-tree").strip() != "true":
            return None
    except (ConsoleError, OSError, subprocess.TimeoutExpired):
        return None   # not a work tree, or no git at all
    try:
        commit = _git(folder, "rev-parse", "HEAD").strip()
    except (ConsoleError, subprocess.TimeoutExpired):
        commit = ""   # a repository with no commit yet
    try:
        branch = _git(folder, "rev-parse", "--abbrev-ref", "HEAD").strip() if commit else ""
        diff = _git(folder, "diff", "HEAD", "--", ".") if commit else ""
        untracked = _git(folder, "ls-files", "--others", "--exclude-standard", "--", ".").splitlines()
    except (ConsoleError, OSError, subprocess.TimeoutExpired) as err:
        return {"commit": commit, "error": str(err)}
    raw = diff.encode()
    return {"root": _git(folder, "rev-parse", "--show-toplevel").strip(), "commit": commit,
            "branch": branch, "dirty": bool(diff or untracked),
            "diff": raw[:MAX_DIFF].decode(errors="replace"), "diff_bytes": len(raw),
            "diff_truncated": len(raw) > MAX_DIFF, "diff_sha256": hashlib.sha256(raw).hexdigest() if raw else "",
            "untracked": untracked[:MAX_UNTRACKED], "untracked_count": len(untracked)}


def write(run_dir: Path, record: dict) -> None:
    write_private(Path(run_dir) / RECORD, json.dumps(record, indent=1))


def read(run_dir: Path) -> dict:
    """The run's record, or {} (a run launched before records, or a damaged file)."""
    return read_dict(Path(run_dir) / RECORD)


# ---- from the hosts -------------------------------------------------------------------------

def host_part(versions: dict[str, dict], chief: str) -> dict:
    """The record's hosts and packages from each task's versions.json (empty ones skipped)."""
    hosts = {task: {k: v.get(k) for k in HOST_KEYS if k in v} for task, v in versions.items() if v}
    packages = (versions.get(chief) or {}).get("packages")
    out: dict = {"hosts": hosts} if hosts else {}
    if isinstance(packages, list):
        out["packages"] = [str(p) for p in packages[:MAX_PACKAGES]]
    return out


def keep_host_versions(run) -> bool:
    """Read every task's versions (``diagnosis.health.task_versions``) into the record; True if
    it changed. Best effort: a host that does not answer keeps what was recorded before."""
    from backend.diagnosis import health   # reaches the hosts: only who keeps versions needs it
    try:
        found = host_part(health.task_versions(run), run.state.chief.name)
    except ConsoleError:
        return False
    if not found.get("hosts"):
        return False
    record = read(run.local_dir)
    merged = {**record, "hosts": {**record.get("hosts", {}), **found["hosts"]}}
    if "packages" in found:
        merged["packages"] = found["packages"]
    if merged == record:
        return False
    write(run.local_dir, merged)
    return True


# ---- what is shown --------------------------------------------------------------------------

def view(state: RunState, run_dir: Path) -> dict:
    """The run as the Runs page and ``runs show --json`` show it: no secret in it."""
    record = read(run_dir)
    job = dict(state.job)
    if job.get("env"):
        job["env"] = {k: MASK for k in job["env"]}   # may hold API keys: names only
    alerts = alert_settings.load(run_dir)
    return {
        "run_id": state.run_id, "phase": str(state.phase), "created": state.created, "owner": state.owner,
        "attempts": [{"number": a.number, "resume_step": a.resume_step, "last_step": a.last_step,
                      "reason": a.reason} for a in state.attempts],
        "cluster": state.cluster, "job": job,
        "code": {k: record[k] for k in ("module", "command", "git") if k in record},
        "hosts": record.get("hosts", {}), "packages": record.get("packages", []),
        "console": record.get("console", {}),
        "project": project.read_info(run_dir),
        "alerts": {**alert_settings.shown(alerts),
                   "sent": [{k: e.get(k) for k in ("id", "state", "tries", "error")}
                            for e in outbox.read(run_dir)]} if alerts else {},
    }


def _flat(value, prefix: str = "") -> dict[str, str]:
    """Nested dicts and lists as "a.b[0].c" -> text, for a row-by-row comparison."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: "" if value is None else (" ".join(map(str, value)) if isinstance(value, list) else str(value))}


def _rows(what: str, a: dict, b: dict) -> list[dict]:
    fa, fb = _flat(a), _flat(b)
    return [{"what": what, "item": k, "A": fa.get(k, "-"), "B": fb.get(k, "-")}
            for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _packages(items: list) -> dict:
    """["numpy==2.1.0", ...] -> {"numpy": "2.1.0"}."""
    return dict(p.split("==", 1) if "==" in p else (p, "") for p in items)


def differences(a: dict, b: dict, *, max_packages: int = 50) -> list[dict]:
    """What differs between two views: parameters, hosts, versions, code, packages; one row each
    ({"what", "item", "A", "B"}), nothing for what is the same."""
    rows = _rows("parameters", a["job"].get("params", {}), b["job"].get("params", {}))
    rows += _rows("job", {k: v for k, v in a["job"].items() if k not in ("params", "module")},
                  {k: v for k, v in b["job"].items() if k not in ("params", "module")})
    rows += _rows("hosts", {"tasks": a["cluster"].get("tasks", a["cluster"])},
                  {"tasks": b["cluster"].get("tasks", b["cluster"])})
    rows += _rows("versions", a.get("hosts", {}), b.get("hosts", {}))
    rows += _rows("code", _code(a["code"]), _code(b["code"]))
    pa, pb = _packages(a.get("packages", [])), _packages(b.get("packages", []))
    if pa or pb:
        changed = _rows("packages", pa, pb)
        rows += changed[:max_packages]
        if len(changed) > max_packages:
            rows.append({"what": "packages", "item": f"... {len(changed) - max_packages} more", "A": "", "B": ""})
    return rows


def _code(code: dict) -> dict:
    """What identifies the code: the module's hash, the commit, whether and how it was changed."""
    module, git = code.get("module") or {}, code.get("git") or {}
    return {"module": module.get("name"), "module sha256": module.get("sha256"),
            "command": code.get("command"), "git commit": git.get("commit"),
            "uncommitted changes": (f"{git.get('diff_bytes', 0)} bytes, sha256 {git.get('diff_sha256', '')[:12]}"
                                    if git.get("dirty") else "none") if git else None}


def summary(shown: dict) -> list[str]:
    """``view`` as lines for a terminal."""
    code = _code(shown["code"])
    git = shown["code"].get("git") or {}
    lines = [f"{k}: {v}" for k, v in code.items() if v]
    owner = identity.Identity.of(shown.get("owner"))
    lines.insert(0, f"started by: {owner.shown() if owner else 'not recorded (a run from before owners)'}")
    if git.get("error"):
        lines.append(f"git: {git['error']}")
    elif not git and shown["code"].get("module"):
        lines.append("git: the job's folder is not in git")
    if git.get("untracked_count"):
        lines.append(f"untracked files: {git['untracked_count']} ({', '.join(git.get('untracked', [])[:5])})")
    folder = shown.get("project") or {}
    if folder:
        tar = (f", tar sha256 {folder['tar_sha256'][:16]} (its name in the hosts' cache)"
               if folder.get("tar_sha256") else "")   # runs from before tar_sha256 was recorded
        lines.append(f"project: content sha256 {folder.get('sha256', '?')[:16]}{tar}, {folder.get('files')} files, "
                     f"{(folder.get('bytes') or 0) / 2**20:.2f} MiB, {folder.get('left_out')} left out"
                     + (f" ({folder['ignore_file']})" if folder.get("ignore_file") else ""))
        lines += [f"  {path} {size} B" for path, size in folder.get("listed", [])[:20]]
    lines += [f"param {k}: {v}" for k, v in (shown["job"].get("params") or {}).items()]
    for i, task in enumerate(shown["cluster"].get("tasks", [])):
        lines.append(f"task {i}: " + ", ".join(f"{k} {v}" for k, v in task.items()))
    for task, v in shown["hosts"].items():
        lines.append(f"{task}: " + ", ".join(f"{k} {v[k]}" for k in HOST_KEYS if k in v))
    if not shown["hosts"]:
        lines.append("host versions: not recorded yet (kept when an attempt ends)")
    if shown["packages"]:
        lines.append(f"chief's packages: {len(shown['packages'])} (--json lists them)")
    alerts = shown.get("alerts") or {}
    if alerts:
        sent = ", ".join(f"{e['id']} {e['state']}" for e in alerts.get("sent", [])) or "none yet"
        lines.append(f"alerts: {alerts.get('format')} to {alerts.get('webhook')}; {sent}")
    return lines
