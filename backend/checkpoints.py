"""Checkpoint actions, on the chief only: list, save now, export, restore.

The harness does the work on the hosts (``ckpt_index.py``, ``export.py``, the training loop);
this module runs those over the run's transports and turns their answers into typed results.
"""
from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

from backend import keeper_process
from backend.attempts import begin_attempt
from backend.errors import ArtifactError, HostError, RunError
from backend.harness import layout
from backend.run import Run
from backend.runs import Phase

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
EXPORT_TIMEOUT_S = 900


def _harness(run: Run, task: str, script: str, *args: str, timeout: float = 60):
    t = run._task(task)
    spec = run.task_spec(task)
    return run.transport(task).run([spec.python, f"{t.remote_run_dir}/{layout.HARNESS}/{script}", *args],
                                   timeout=timeout)


def checkpoint_dir(run: Run, task: str) -> str:
    t = run._task(task)
    if task == run.state.chief.name:
        return f"{t.remote_run_dir}/{layout.CHECKPOINTS}"
    return layout.worker_checkpoint_dir(t.remote_run_dir, task)


def list_checkpoints(run: Run, task: str | None = None) -> list[dict]:
    """Complete checkpoints of the chief (or of ``task``), oldest first, with meta and sizes."""
    task = task or run.state.chief.name
    result = _harness(run, task, "ckpt_index.py", checkpoint_dir(run, task))
    if not result.ok:
        raise HostError(run.task_spec(task).host, "could not list checkpoints",
                        "Check that the run directory exists on the chief.", stderr_tail=result.stderr)
    return json.loads(result.stdout)


def save_now(run: Run, *, wait_s: float = 0) -> int | None:
    """Ask every worker to save at the next sync point; with ``wait_s``, return the step saved."""
    if not run.state.live:
        raise RunError(f"run {run.run_id} is {run.state.phase}, not live",
                       "Save now works on a running job; its last checkpoints are listed below.")
    name = run.request_save()
    if not wait_s:
        return None
    chief = run.state.chief
    done = f"{chief.remote_run_dir}/{layout.REQUESTS}/{name[:-len('.json')]}.done"
    deadline = time.time() + wait_s
    while time.time() < deadline:
        result = run.transport(chief.name).run(["cat", done], timeout=30)
        if result.ok and result.stdout.strip():
            return int(json.loads(result.stdout)["step"])
        time.sleep(0.5)
    raise RunError(f"no save after {wait_s:.0f} s", "The job may be stuck or between epochs; check its log.")


def export(run: Run, *, step: int | None = None, name: str | None = None,
           formats: tuple[str, ...] = ("savedmodel", "keras")) -> dict:
    """Export a complete checkpoint on the chief's host and verify it in a fresh process."""
    if name is not None and (not NAME.match(name) or ".." in name):
        raise ArtifactError(f"export name {name!r} is not valid",
                            "Use letters, digits, '.', '_' and '-' (no '/').")
    if run.job.module is None:
        raise ArtifactError("this run is a command job, not a harness job",
                            "Export works on harness jobs, whose model the harness can rebuild.")
    chief = run.state.chief
    args = ["--run-dir", chief.remote_run_dir, "--job",
            f"{chief.remote_run_dir}/{layout.JOB}/{Path(run.job.module).name}", "--formats", ",".join(formats)]
    args += ["--step", str(step)] if step is not None else []
    args += ["--name", name] if name else []
    result = _harness(run, chief.name, "export.py", *args, timeout=EXPORT_TIMEOUT_S)
    ok = [line for line in result.stdout.splitlines() if line.startswith("EXPORT OK ")]
    if result.ok and ok:
        return json.loads(ok[-1][len("EXPORT OK "):])
    reason = [line for line in result.stderr.splitlines() if line.startswith("EXPORT ")]
    raise ArtifactError(reason[-1] if reason else f"export failed (exit {result.exit_code})",
                        "Earlier exports and checkpoints are untouched; pick another checkpoint or fix the cause.")


def list_exports(run: Run) -> list[dict]:
    chief = run.state.chief
    folder = f"{chief.remote_run_dir}/{layout.EXPORTS}"
    script = ("import json, os, sys; d = sys.argv[1]; out = []\n"
              "for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:\n"
              "    p = os.path.join(d, n, 'result.json')\n"
              "    if not n.startswith('.') and os.path.exists(p): out.append(json.load(open(p)))\n"
              "print(json.dumps(out))")
    result = run.transport(chief.name).run([run.task_spec(chief.name).python, "-c", script, folder])
    return json.loads(result.stdout) if result.ok else []


def fetch_export_file(run: Run, name: str, relative: str, local_path: str) -> str:
    """Copy one file of an export (``model.keras``) to this machine, for download."""
    if not NAME.match(name) or ".." in relative or relative.startswith("/"):
        raise ArtifactError(f"{name}/{relative} is not a valid export file", "Pick one from the list.")
    chief = run.state.chief
    run.transport(chief.name).get(f"{chief.remote_run_dir}/{layout.EXPORTS}/{name}/{relative}", local_path)
    return local_path


def restore(run: Run, step: int) -> None:
    """Relaunch the job from checkpoint ``step`` on every worker, as a new attempt of this run."""
    chief_ckpts = {c["step"]: c for c in list_checkpoints(run)}
    if step not in chief_ckpts:
        raise ArtifactError(f"checkpoint step {step} is not complete on the chief",
                            f"Choose one of the complete steps: {sorted(chief_ckpts) or 'none yet'}.")
    if run.state.live:
        run.stop(reason=f"restore from step {step}")
    for t in run.state.tasks:
        if t.name != run.state.chief.name:
            _ensure_copy(run, t.name, chief_ckpts[step])
    begin_attempt(run, resume_step=step, expect=(Phase.STOPPED, Phase.FINISHED, Phase.FAILED))
    if run.kept:
        _rekeep(run)


def _rekeep(run: Run, wait_s: float = 10.0) -> None:
    """The stop above ended the run's keeper; a restored run is kept again like a launched one."""
    deadline = time.time() + wait_s
    while keeper_process.keeper_pid(run.local_dir) and time.time() < deadline:
        time.sleep(0.1)
    keeper_process.start_keeper(run.run_id, run.store.root, run.pool.options)


def common_checkpoint(run: Run) -> int | None:
    """The newest step that every task holds complete; None means start from scratch."""
    steps = [{c["step"] for c in list_checkpoints(run, t.name)} for t in run.state.tasks]
    common = set.intersection(*steps) if steps else set()
    return max(common) if common else None


def _ensure_copy(run: Run, task: str, chief_ckpt: dict) -> None:
    """Give a worker the chief's checkpoint files when it lacks that step (no shared storage)."""
    if any(c["step"] == chief_ckpt["step"] for c in list_checkpoints(run, task)):
        return
    chief = run.state.chief.name
    target = checkpoint_dir(run, task)
    with tempfile.TemporaryDirectory() as tmp:
        # meta.json last: the copy counts as complete only once everything else is there.
        names = sorted(chief_ckpt["files"], key=lambda n: n.endswith(".meta.json"))
        for name in names:
            local = str(Path(tmp) / name)
            run.transport(chief).get(f"{chief_ckpt['dir']}/{name}", local)
            run.transport(task).put(local, f"{target}/{name}")
