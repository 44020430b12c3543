"""Launch a run on every host (all or nothing) and attach to existing runs.

The run's record is written first; its job module is copied into the local run directory once,
so the record reloads without the user's files and every restart ships the same code. Beside it:
what ran (``record.json``: the module's hash, its folder's git state) and where alerts go
(``alerts/settings.json``, owner-only: a webhook URL is a secret, never in the state).
"""
from __future__ import annotations

import enum
import secrets
import shlex
import shutil
import time
from dataclasses import replace
from pathlib import Path

from backend import engines
from backend.alerts import outbox, settings as alert_settings
from backend.runs import detached, record
from backend.access import audit, identity
from backend.records import project
from backend.runs.attempts import begin_attempt
from backend.client.harness.contract import layout
from backend.hosts.pool import Pool
from backend.hosts.ssh import SSHOptions
from backend.runs.handle import Run
from backend.runs.store import RunStore
from backend.records.state import Phase, RunState, TaskState, new_run_id
from backend.config.values import landing_name
from backend.config.slurm_spec import SlurmSpec
from backend.config.spec import ClusterSpec, JobKind, JobSpec, job_to_dict


class Preflight(enum.Enum):
    REQUIRED = "required"  # refuse to launch when any host fails a check
    SKIP = "skip"          # the caller has just run it (the console shows its table first)


def launch(cluster: ClusterSpec | SlurmSpec, job: JobSpec, *, store: RunStore | None = None,
           options: SSHOptions | None = None, preflight: Preflight = Preflight.REQUIRED,
           run_id: str | None = None, sweep: dict | None = None) -> Run:
    """Start every task, or none: if any fails to start, the started ones are stopped.

    ``cluster`` is a list of hosts, or a ``SlurmSpec`` (Slurm starts the tasks; its own checks
    at ``sbatch`` time replace preflight, and refuse with Slurm's message). Who launched it is
    the run's owner, and the launch is a line of the runs folder's audit (access/audit.py).
    ``sweep``: the sweep trial this run is ({"sweep", "trial", "params"}), kept in its record.
    """
    store = store or RunStore()
    run_id = run_id or new_run_id()
    details = {"kind": job.kind.value,
               "job": Path(job.module).name if job.module else shlex.join(job.command)[:200],
               "alerts": alert_settings.shown(job.alerts) or None}   # the run's alert settings, URL masked
    with audit.recording(store.root, "launch", run=run_id, args=details):
        return _launch(cluster, job, store, options, preflight, run_id, sweep)


def _launch(cluster, job: JobSpec, store: RunStore, options: SSHOptions | None, preflight: Preflight,
            run_id: str, sweep: dict | None = None) -> Run:
    # Before preflight: a folder that cannot hold the run refuses it before any host is touched.
    run_id = store.require_new(run_id)
    pool = Pool(options)
    # checked: preflight's reports; each host's versions go into the record now, not at stop
    saved, cluster, checked = engines.prepare(cluster, job, pool, preflight=preflight == Preflight.REQUIRED)
    # The remote folder carries a fresh suffix: a reused run id (after `make clean`, say) never
    # meets an older run's metrics or checkpoints on a host.
    remote_name = f"{run_id}.{secrets.token_hex(3)}"
    alerts = alert_settings.resolve(job.alerts, store.root)   # a console file others may read refuses
    local_dir = store.reserve(run_id)
    source, job = job.module, _keep_module(replace(job, alerts={}), local_dir)   # the URL: a secret
    outbox.keep_settings(local_dir, alerts)
    record.write(local_dir, {**record.build(job.module, source, job.command),
                             **record.host_part({r.task: r.versions() for r in checked}, chief="")})
    state = RunState(run_id, time.time(), saved, job_to_dict(job),
                     [TaskState(n, i, t.host, layout.run_dir(t.workdir, remote_name))
                      for i, (n, t) in enumerate(zip(cluster.task_names(), cluster.tasks))],
                     owner=identity.current().as_dict(), sweep=sweep)
    store.save(state)
    run = Run(state, store, pool)
    begin_attempt(run, resume_step=None, expect=(Phase.LAUNCHING,))
    if run.watched:
        detached.start_keeper(run.run_id, store.root, pool.options)
    return run


def _keep_module(job: JobSpec, local_dir: Path) -> JobSpec:
    """Copy the job module (or a command job's files) into the run's folder: edits or moves of
    the original change nothing, and a restart ships the same files."""
    if job.project and Path(job.project).is_dir():   # packed once: every attempt ships this copy
        tar_path, _ = project.keep(job.project, local_dir)
        return replace(job, project=str(tar_path))
    if job.files:
        kept = []
        for path in job.files:   # each with the tree it keeps (models/net.py), marked as the spec marks it
            name = landing_name(path)
            target = local_dir / layout.JOB / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            kept.append(f"{local_dir / layout.JOB}/./{name}")
        return replace(job, files=tuple(kept))
    if job.kind != JobKind.HARNESS:
        return job
    target = local_dir / layout.JOB / Path(job.module).name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(job.module, target)
    return replace(job, module=str(target))


def attach(run_id: str, *, store: RunStore | None = None, options: SSHOptions | None = None,
           reads_only: bool = False) -> Run:
    """A handle on an existing run, from its saved state: for status, logs and stop.
    ``reads_only``: the caller records nothing (``logs``), so a runs folder it cannot write is
    no reason to refuse it."""
    store = store or RunStore()
    state = store.load(run_id)
    if state.live and not reads_only:   # its readers record what they find (settle, log copies): say so first
        store.require_writable(run_id)
    return Run(state, store, Pool(options))


__all__ = ["Preflight", "launch", "attach"]
