"""The direct engine (``HostsEngine``): the console itself starts, inspects and stops each task on
its host, over SSH or as a local process, with no scheduler between (Slurm's is ``slurm.py``).

Each host gets the run's bundle (``bundle.py``: the package under ``RUN/lib``, the job's files under
``RUN/job``), then every action is one ``python -S RUN/lib hostctl SUBCOMMAND`` per host
(``backend.hosts.remote``): ``start`` runs each task detached in its own session and process
group; its pid, pgid, exit code and log stay in the run directory on that host.
"""
from __future__ import annotations

import json
from pathlib import Path

from backend.diagnosis import diagnose
from backend.hosts import remote
from backend.config import tfconfig
from backend.engines.bundle import bundle, harness_bundle
from backend.engines.base import Capabilities, RunView, Started, StopReport
from backend.errors import HostError, HostKeyChanged, MultiHostError
from backend.client.harness.contract import layout, taskenv
from backend.hosts.resolve import tf_addresses
from backend.hosts.pool import Pool, failures, parallel
from backend.hosts.tasks import by_host, task_host
from backend.records.outcome import TaskPhase, TaskStatus, key_change
from backend.config.spec import ClusterSpec, JobKind, JobSpec, TaskSpec


START_CHECK_S = 3.0   # a task that dies this soon after starting failed to start (checked on the host)


def task_cwd(job: JobSpec, run_dir: str) -> str | None:
    """Where a command job with shipped files runs (RUN/job, so ``train.py`` names the shipped
    copy); None: the host's home, as before."""
    return f"{run_dir}/{layout.JOB}" if job.files or job.project else None


def task_argv(job: JobSpec, spec: TaskSpec, run_dir: str, run_id: str, attempt: int,
              resume_step: int | None) -> list[str]:
    if job.kind == JobKind.COMMAND:
        command = list(job.command)
        return [spec.python, *command] if command[0].endswith(".py") else command
    argv = [*layout.host_argv(spec.python, run_dir, "train", site=True), "--run-dir", run_dir,
            "--job", f"{run_dir}/{layout.JOB}/{Path(job.module).name}",
            "--run-id", run_id, "--attempt", str(attempt)]
    for key, value in job.params.items():
        argv += ["--param", f"{key}={value}"]
    if resume_step is not None:
        argv += ["--resume-step", str(resume_step)]
    return argv


def task_env(cluster: ClusterSpec, position: int, job: JobSpec, run_dir: str, run_id: str,
             attempt: int, name: str, addresses: list[str] | None = None,
             resume_step: int | None = None) -> dict[str, str]:
    spec = cluster.tasks[position]
    return {**job.env, **client_env(run_dir, name == cluster.task_names()[0], resume_step,
                                    job.env.get("PYTHONPATH")),
            "TF_CONFIG": json.dumps(tfconfig.tf_config(cluster, position, addresses)),
            # An empty list hides every GPU: a CPU task must not grab one by accident.
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in spec.gpus),
            "PYTHONUNBUFFERED": "1",
            taskenv.RUN_DIR: run_dir, taskenv.RUN_ID: run_id,
            taskenv.ATTEMPT: str(attempt), taskenv.TASK: name}


def client_env(run_dir: str, is_chief: bool, resume_step: int | None,
               pythonpath: str | None = None) -> dict[str, str]:
    """What ``import tfconsole`` in a command job needs: the library on the path, the resume step
    and the chief's name (spawn.py keeps the host's own PYTHONPATH after ours)."""
    return {"PYTHONPATH": ":".join(p for p in (f"{run_dir}/{layout.LIB}", pythonpath) if p),
            taskenv.IS_CHIEF: "1" if is_chief else "0",
            taskenv.RESUME_STEP: taskenv.resume_value(resume_step)}


class HostsEngine(Capabilities):
    reports_start_stages = True   # hostctl start writes each task's pid file and READY
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    # -- helpers --------------------------------------------------------------------------
    def _by_host(self, run: RunView) -> list:
        """One command per host and run folder, not per task: (name, group) for ``parallel``."""
        return [(g.name, g) for g in by_host(run.state.tasks, run.cluster)]

    def chief_transport(self, run: RunView):
        return self.pool.transport(run.cluster.tasks[run.state.chief.position])

    # -- the protocol ---------------------------------------------------------------------
    def begin(self, run: RunView, *, attempt: int, resume_step: int | None) -> dict[str, Started]:
        files = bundle(run.job, project=False)
        kept = Path(run.job.project).read_bytes() if run.job.project else None
        addresses = tf_addresses(run.cluster, self.pool.options.ssh_config)  # what the workers dial
        started: dict[str, Started] = {}

        def one(group) -> None:
            spec, run_dir, tasks = group.spec, group.run_dir, group.tasks
            h = group.host(self.pool)
            remote.install(h, files)
            if kept is not None:
                remote.project(h, kept)
            if run.job.pip_install:   # asked for: into this host's Python, before any task starts
                remote.pip(h)
            answers = remote.start(h, [
                {"task": t.name,
                 "argv": task_argv(run.job, run.cluster.tasks[t.position], run_dir, run.run_id, attempt, resume_step),
                 "env": task_env(run.cluster, t.position, run.job, run_dir, run.run_id, attempt, t.name, addresses,
                                resume_step),
                 "cwd": task_cwd(run.job, run_dir),
                 "ready": run.job.kind == JobKind.HARNESS}   # says when past its imports (spawn.READY)
                for t in tasks], wait_s=20, settle_s=START_CHECK_S)
            for t in tasks:
                info = answers[t.name]
                if info.state == "busy":
                    raise HostError(spec.host, f"task {t.name} of an earlier attempt still runs "
                                    f"(process group {info.pgid})",
                                    "Stop the run first (`python -m backend stop RUN`), then try again.")
                # "starting": the supervisor runs but a loaded host has not recorded the pid yet;
                # status and stop read the pid from the host, so that is fine.
                started[t.name] = Started(info.pid, info.pgid, info.started)
                if info.state == "lost" or (info.state == "exited" and info.exit_code != 0):
                    log = diagnose.current_attempt(self.log_tail(run, t.name, 4000))
                    raise HostError(spec.host, f"task {t.name} did not start (exit {info.exit_code})",
                                    diagnose.diagnose(log) or "Check the task's Python and command.",
                                    stderr_tail=log[-2000:])

        errors = failures(parallel(one, self._by_host(run)))
        if errors:
            raise MultiHostError("launch", errors, "Fix the cause and launch again.")
        return started

    def status(self, run: RunView) -> list[TaskStatus]:
        def one(group):
            return remote.status(group.host(self.pool), group.names)
        groups = self._by_host(run)
        results = parallel(one, groups)
        out: dict[str, TaskStatus] = {}
        for key, group in groups:
            res = results[key]
            for name in group.names:
                host = run.task(name).host
                if isinstance(res, Exception):
                    out[name] = TaskStatus(name, host, TaskPhase.UNREACHABLE, diagnosis=str(res),
                                           key_change=key_change(res))
                else:
                    info = res[name]
                    out[name] = TaskStatus(name, host, TaskPhase(info.state), info.exit_code,
                                           ready=info.ready, set_up=info.set_up, ended_ago_s=info.ended_ago_s)
        for s in out.values():
            if s.failed and s.state == TaskPhase.EXITED:
                try:
                    s.diagnosis = diagnose.diagnose(diagnose.current_attempt(self.log_tail(run, s.name, 20000)))
                except HostError:
                    s.diagnosis = None
        return [out[t.name] for t in run.state.tasks if t.name in out]

    def stop(self, run: RunView, *, grace_s: float) -> StopReport:
        """Every host at once (``parallel``); on each, every task and all it started at once
        (``proctree.stop``: by process group and by the mark its processes inherit). A host whose
        run folder was removed is still swept, from a temporary copy of the harness, with the
        process groups kept in the run's record."""
        harness = harness_bundle()

        def one(group) -> dict[str, dict]:
            recorded = {t.name: t.pgid for t in group.tasks}
            try:
                answers = remote.stop_tasks(group.host(self.pool), group.names, grace_s=grace_s,
                                            groups=recorded, harness=harness)
            except remote.NotInstalled:
                return {}   # no Python at the tasks' path (exit 127): none of ours could start there
            left = {n: a["left"] for n, a in answers.items() if a.get("left")}
            if left:
                raise HostError(group.spec.host, f"processes still alive after stop: {left}",
                                "Stop them by hand (kill -9) and report a bug.")
            return answers
        groups = self._by_host(run)
        results = parallel(one, groups)
        errors = failures(results)
        hosts = {key: group.spec.host for key, group in groups}
        # A host whose key changed answered: it is held for a check, never counted as silent.
        unreachable = [hosts[k] for k, e in errors.items() if isinstance(e, HostError)
                       and not isinstance(e, HostKeyChanged) and "still alive" not in e.problem]
        answers = {n: a for r in results.values() if not isinstance(r, Exception) for n, a in r.items()}
        return StopReport({hosts[k]: e for k, e in errors.items()}, unreachable,
                          killed=sorted(n for n, a in answers.items() if a.get("killed")),
                          found=sorted(n for n, a in answers.items() if a.get("found")))

    def log_tail(self, run: RunView, task: str, max_bytes: int) -> str:
        h = task_host(self.pool, run.cluster, run.task(task))
        return remote.read_tail(h, f"{layout.LOGS}/{task}.log", max_bytes).decode(errors="replace")
