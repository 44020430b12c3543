"""Drive runs from Python: ``tfconsole.launch(cluster, job)`` and the handle it returns.

The stable public API for scripts (docs/cli.md, "From Python"). Thin wrappers over the console's
backend (``backend.runs.launcher``, ``backend.checkpoints``, ``backend.runs.restore``), which
stays importable but internal: its modules have moved before and may again; these names do not.
Standard library only at import: the backend is imported when a function is called, so that
``import tfconsole`` (which finds these names here, lazily: backend/client/__init__.py) stays
cheap. It lives in the backend, not in the package shipped to hosts: a worker host has no
console to drive.
Errors are the console's typed ``ConsoleError`` family (``tfconsole.ConsoleError``): one line
that names the thing and ends with what to do.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

WAIT_FOREVER_S = 10 * 365 * 86400.0


def _options(known_hosts: str, ssh_config: str):
    from backend.hosts.ssh import SSHOptions
    return SSHOptions(known_hosts=known_hosts, ssh_config=ssh_config)


def _store(runs: str | os.PathLike | None):
    from backend.runs.store import RunStore
    return RunStore(runs)


def _cluster(cluster: Any):
    """A cluster file's path, its content as a dict, or a spec (ClusterSpec, SlurmSpec)."""
    from backend.config.kinds import any_cluster_from_dict, load_any_cluster
    if isinstance(cluster, (str, os.PathLike)):
        return load_any_cluster(cluster)
    return any_cluster_from_dict(cluster) if isinstance(cluster, Mapping) else cluster


def _job(job: Any):
    """A job file's path, its content as a dict (module paths relative to the cwd), or a JobSpec."""
    from backend.config.spec import job_from_dict, load_job
    if isinstance(job, (str, os.PathLike)):
        return load_job(job)
    return job_from_dict(job) if isinstance(job, Mapping) else job


class RunHandle:
    """One run, launched or attached: every method asks the run's hosts or record afresh."""

    def __init__(self, run) -> None:
        self._run = run    # backend.runs.handle.Run: internal

    def __repr__(self) -> str:
        return f"<tfconsole run {self.run_id}: {self._run.state.phase}>"

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def phase(self) -> str:
        """The recorded phase: launching, running, queued, restarting, stopping, finished,
        failed or stopped (as last read; ``status()`` reads it afresh)."""
        return str(self._run.reload().phase)

    def status(self) -> dict:
        """What ``tfconsole status RUN --json`` prints: phase, attempt, each task's state, the
        attempts, health, and ``resume`` (warnings for attempts not confirmed as resumed)."""
        from backend.runs.status_view import status_json
        from backend.diagnosis import health
        from backend.runs import resume
        statuses = self._run.settle() or self._run.status()
        resume.refresh(self._run)
        return status_json(self._run, statuses, health_line=health.status_line(self._run))

    def goodput(self) -> dict:
        """What ``tfconsole goodput RUN --json`` prints: the run's task-seconds, the share spent in
        training kept (``goodput``), the rest by cause (they add up), and each attempt's cost."""
        from backend.runs import goodput
        self._run.reload()
        return goodput.of(self._run).as_dict()

    def checkpoints(self) -> list[dict]:
        """The chief's complete checkpoints, oldest first: step, epoch, losses, metrics, files."""
        from backend import checkpoints
        return checkpoints.list_checkpoints(self._run)

    def save_now(self, wait_s: float = 120.0) -> int | None:
        """Ask every worker to save at its next sync point; the step saved, or None when
        ``wait_s`` is 0 (the request stays and is answered later)."""
        from backend import checkpoints
        return checkpoints.save_now(self._run, wait_s=wait_s)

    def profile(self, steps: int = 5, wait_s: float = 180.0) -> dict:
        """Profile every worker for ``steps`` steps from its next sync point (TensorFlow's
        profiler); what ``tfconsole profile RUN --json`` prints: the window, and each task's op
        time split (compute, collective, input), top ops and trace path on this machine."""
        from backend import profiles
        found = profiles.profile(self._run, steps, wait_s=wait_s, say=lambda s: None)
        return {"step": found.step, "steps": found.steps, "folder": str(found.folder), "tasks": found.tasks}

    def export(self, step: int | None = None, *, name: str | None = None,
               formats: tuple[str, ...] = ("savedmodel", "keras")) -> dict:
        """Export a checkpoint (None: the newest) on the chief and verify it in a fresh process;
        the export's result (step, name, paths)."""
        from backend import checkpoints
        return checkpoints.export(self._run, step=step, name=name, formats=tuple(formats))

    def restore(self, step: int, *, wait_s: float = 180.0):
        """Start a new attempt from checkpoint ``step`` (stopping the run if it is live). The
        result's ``confirmed`` says whether every worker confirmed resuming from it; if not,
        ``warning`` says why and what the script must read (``summary``: one line for a user)."""
        from backend.runs import restore
        return restore.restore(self._run, int(step), wait_s=wait_s)

    def stop(self, *, save: bool = False) -> None:
        """Stop every task and check nothing is left (``save``: every worker saves one step
        first). Raises naming the hosts that did not answer."""
        if self._run.reload().live:
            self._run.stop(save=save)

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run has ended (or ``timeout`` seconds passed); its phase then."""
        self._run.wait(timeout=WAIT_FOREVER_S if timeout is None else float(timeout))
        return str(self._run.state.phase)


def launch(cluster: Any, job: Any, *, runs: str | os.PathLike | None = None,
           run_id: str | None = None, preflight: bool = True,
           known_hosts: str = "~/.ssh/known_hosts", ssh_config: str = "~/.ssh/config") -> RunHandle:
    """Start ``job`` on ``cluster`` (each a file's path, a dict, or a spec), as the console's
    Start does; the run's record goes in ``runs`` (default: $TFCONSOLE_RUNS or ./runs).
    ``preflight=False`` skips the host checks (the local cluster, hosts just checked)."""
    from backend.runs import launcher
    run = launcher.launch(_cluster(cluster), _job(job), store=_store(runs),
                          options=_options(known_hosts, ssh_config), run_id=run_id,
                          preflight=launcher.Preflight.REQUIRED if preflight else launcher.Preflight.SKIP)
    return RunHandle(run)


def attach(run_id: str, *, runs: str | os.PathLike | None = None,
           known_hosts: str = "~/.ssh/known_hosts", ssh_config: str = "~/.ssh/config") -> RunHandle:
    """A handle on an existing run (one the console, the CLI or another script started)."""
    from backend.runs import launcher
    return RunHandle(launcher.attach(run_id, store=_store(runs), options=_options(known_hosts, ssh_config)))


def sweep_start(sweep: Any, *, runs: str | os.PathLike | None = None, sweep_id: str | None = None,
                known_hosts: str = "~/.ssh/known_hosts", ssh_config: str = "~/.ssh/config") -> str:
    """Start a hyperparameter sweep (a sweep file's path or its content as a dict; docs/sweeps.md); its keeper runs detached, so the sweep outlives this process. Returns its id."""
    from backend.config.yaml_files import read_yaml
    from backend.sweeps import control
    from backend.sweeps.spec import load_sweep, sweep_from_dict
    if isinstance(sweep, (str, os.PathLike)):
        spec, data = load_sweep(sweep), read_yaml(sweep)
    else:
        spec, data = sweep_from_dict(sweep), dict(sweep)
    return control.start(spec, data, _store(runs).root, _options(known_hosts, ssh_config), sweep_id=sweep_id)


def sweep_status(sweep_id: str, *, runs: str | os.PathLike | None = None) -> dict:
    """A sweep's phase, objective, budget, best trial and every trial (``sweep status --json``)."""
    from backend.sweeps import control
    return control.status(_store(runs).root, sweep_id)


def sweep_stop(sweep_id: str, *, runs: str | os.PathLike | None = None) -> dict:
    """Stop a sweep: its running trials stop, its keeper ends; its status after."""
    from backend.sweeps import keeper
    return keeper.stop(_store(runs).root, sweep_id)


def sweep_resume(sweep_id: str, *, runs: str | os.PathLike | None = None) -> dict:
    """Start a keeper again for a sweep whose keeper is gone; its status after."""
    from backend.sweeps import control
    return control.resume(_store(runs).root, sweep_id)


def sweep_export(sweep_id: str, *, runs: str | os.PathLike | None = None, name: str | None = None,
                 known_hosts: str = "~/.ssh/known_hosts", ssh_config: str = "~/.ssh/config") -> dict:
    """Export the best trial's best checkpoint, verified as Export does; what Export returns,
    with the trial, its run and the step chosen."""
    from backend.sweeps import best
    return best.export_best(_store(runs).root, sweep_id, _options(known_hosts, ssh_config), name=name)


def __getattr__(name: str):
    if name == "ConsoleError":   # lazily: the backend is not on worker hosts
        from backend.errors import ConsoleError
        return ConsoleError
    raise AttributeError(f"module 'backend.api' has no attribute {name!r}")
