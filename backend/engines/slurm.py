"""The Slurm engine: an attempt is one ``sbatch`` job; Slurm starts, tracks and ends its tasks.

Every command runs on the login host (local, or over the SSH transport with its aliases, keys and
jump hosts): ``sbatch --parsable`` of the script ``backend.engines.slurm_script`` builds,
``scontrol show job`` (with each task's exit file) for status, ``scancel`` to stop. The run
folder is on a filesystem the login host shares with the nodes (docs/slurm.md), so logs,
metrics and checkpoints are read on the login host, and the watch agent, save now, export and
restore work there unchanged. Each attempt's Slurm job id is kept in the local run folder
(``slurm.json``): a restart is a new job, resuming from the newest checkpoint. When the cluster
requeues a job itself (Slurm's ``Restarts`` grows), the same job id runs again as the next attempt
(``requeued``): the run follows it, and no new job is submitted.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from backend.diagnosis import diagnose
from backend.hosts import remote
from backend.engines.base import Capabilities, RunView, Started, StopReport
from backend.engines.bundle import bundle
from backend.errors import ConsoleError, HostError
from backend.client.harness.contract import layout
from backend.hosts.pool import Pool
from backend.records.outcome import TaskPhase, TaskStatus, key_change
from backend.records.state import Attempt, Phase, RunState, TaskState, check_run_id
from backend.files import write_private
from backend.access import identity
from backend.engines import slurm_script as batch
from backend.config.slurm_spec import SlurmSpec, slurm_to_dict
from backend.engines.slurm_states import (JobInfo, SlurmPhase, parse_scontrol, scontrol_fields, task_statuses,
                                          with_place)
from backend.config.spec import JobKind, JobSpec, job_to_dict


JOBS_FILE = "slurm.json"   # in the local run folder: {"jobs": {attempt: job id}}
STOP_WAIT_S = 120.0        # beyond the grace: Slurm's KillWait (30 s by default) and its cleanup


@dataclass(frozen=True)
class Requeued:
    """The cluster requeued the current attempt's job: the same job runs again as ``attempt``."""
    job_id: str
    restart: int               # Slurm's restart count this attempt is (1: the first requeue)
    attempt: int
    resume_step: int | None    # the step the re-run resumes from, when ``known``
    known: bool                # the re-run's own word (slurm/requeued.json); else not started yet


class SlurmEngine(Capabilities):
    def __init__(self, pool: Pool, spec: SlurmSpec) -> None:
        self.pool, self.spec = pool, spec
        self._seen: tuple[JobInfo | None, dict | None] = (None, None)   # the last probe's job, requeue record

    def _login(self):
        return self.pool.transport(self.spec.login())

    @staticmethod
    def _run_dir(run: RunView) -> str:
        return run.state.chief.remote_run_dir   # every task shares it (one shared filesystem)

    # -- the job id of each attempt ----------------------------------------------------------
    @staticmethod
    def _record(run: RunView) -> dict:
        try:
            return json.loads((run.local_dir / JOBS_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    @classmethod
    def jobs(cls, run: RunView) -> dict[str, str]:
        return cls._record(run).get("jobs", {})

    def job_id(self, run: RunView) -> str | None:
        return self.jobs(run).get(str(run.state.attempt))

    def _remember(self, run: RunView, attempt: int, job_id: str) -> None:
        record = self._record(run)
        record["jobs"] = {**record.get("jobs", {}), str(attempt): job_id}
        write_private(run.local_dir / JOBS_FILE, json.dumps(record))

    # -- the protocol ---------------------------------------------------------------------
    def begin(self, run: RunView, *, attempt: int, resume_step: int | None) -> dict[str, Started]:
        run_dir, login = self._run_dir(run), self._login()
        text = batch.batch_script(self.spec, run.job, run_dir=run_dir, run_id=run.run_id,
                                  attempt=attempt, resume_step=resume_step)
        path = batch.script_path(run_dir, attempt)
        h = remote.Host(login, self.spec.python, run_dir)
        remote.install(h, bundle(run.job, project=False))
        if run.job.project:   # the run's packed copy, from the login host's cache when it has it
            remote.project(h, Path(run.job.project).read_bytes())
        login.run(["mkdir", "-p", "--", f"{run_dir}/{layout.LOGS}", f"{run_dir}/{layout.TASKS}"], timeout=60).check(
            f"cannot create {run_dir}", "Check that workdir is writable on the login host.")
        # 0600: the script holds the job's env, which may hold secrets.
        remote.put_bytes(h, text.encode(), os.path.relpath(path, run_dir), private=True)
        result = login.run(["sbatch", "--parsable", path], timeout=60)
        if not result.ok:   # Slurm's own words: invalid partition, account, QoS, limits
            said = "; ".join(ln.strip() for ln in result.stderr.splitlines() if ln.strip())[-600:]
            raise HostError(login.host, f"sbatch refused the job: {said}",
                            "Fix the Slurm fields of the cluster file (partition, account, qos, "
                            "time_limit, extra) and launch again.", exit_code=result.exit_code)
        job_id = result.stdout.strip().splitlines()[-1].split(";")[0]
        self._remember(run, attempt, job_id)
        now = time.time()
        return {t.name: Started(started=now) for t in run.state.tasks}

    def probe(self, run: RunView, job_id: str) -> tuple[JobInfo | None, dict]:
        """Slurm's view of the job and every task's files, in one command on the login host."""
        adopted = self._record(run).get("adopted")
        if adopted:   # a job we did not submit: no files of ours, Slurm's word only
            text = self._login().run(["scontrol", "show", "job", "-o", job_id], timeout=60).stdout
            job = parse_scontrol(text)
            return job, {t.name: {"info": {"node": job.nodes} if job else None} for t in run.state.tasks}
        run_dir = self._run_dir(run)
        argv = [*layout.host_argv(self.spec.python, run_dir, "slurm_task"), "probe",
                "--run-dir", run_dir, "--job", job_id] + [a for t in run.state.tasks for a in ("--task", t.name)]
        result = self._login().run(argv, timeout=60).check(
            "could not read the Slurm job's state", "Check the login host and that scontrol works there.")
        answer = json.loads(result.stdout)
        job = with_place(parse_scontrol(answer["scontrol"]["out"]), answer.get("queue"))
        self._seen = (job, answer.get("requeued"))
        return job, answer["tasks"]

    def status(self, run: RunView) -> list[TaskStatus]:
        names = [t.name for t in run.state.tasks]
        job_id = self.job_id(run)
        if job_id is None:   # the attempt never reached sbatch
            return [TaskStatus(n, self.spec.host, TaskPhase.LOST) for n in names]
        try:
            job, files = self.probe(run, job_id)
        except (ConsoleError, ValueError, KeyError) as err:
            return [TaskStatus(n, self.spec.host, TaskPhase.UNREACHABLE, diagnosis=str(err),
                               key_change=key_change(err)) for n in names]
        statuses = task_statuses(job, files, names)
        for s in statuses:
            if s.failed and s.diagnosis is None:   # the task's own failure: read its log
                s.diagnosis = diagnose.diagnose(diagnose.current_attempt(self.log_tail(run, s.name, 20000)))
        return statuses

    def requeued(self, run: RunView) -> Requeued | None:
        """After ``status``: the next requeue of the current attempt's job that the run has not
        recorded yet, or None. Not while Slurm still ends the job's processes (COMPLETING, or
        REQUEUED, which some versions show meanwhile): the requeue's SIGTERM may still be saving."""
        job, record = self._seen
        job_id = self.job_id(run)
        if job is None or job.job_id != job_id or job.phase == SlurmPhase.COMPLETING or job.state == "REQUEUED":
            return None
        first = min(int(a) for a, j in self.jobs(run).items() if j == job_id)   # its submitted attempt
        restart = run.state.attempt - first + 1
        if job.restarts < restart:
            return None
        known = bool(record) and record.get("job") == job_id and record.get("restart") == restart
        return Requeued(job_id, restart, run.state.attempt + 1,
                        record.get("resume_step") if known else None, known)

    def follow(self, run: RunView, found: Requeued) -> None:
        """The requeued job is the new attempt's job too (before the run records that attempt, so
        every reader finds the attempt's job)."""
        self._remember(run, found.attempt, found.job_id)

    def time_limit(self, record: dict | None) -> str | None:
        """The job's time limit when the preemption ``record`` (``tasks/<chief>.preempted``) is
        the save on the signal Slurm sends ahead of it; None for any other signal. As Slurm
        shows it (``00:10:00``) when it still knows the job, else as the cluster file says."""
        if not record or record.get("signal") != f"SIG{batch.TIME_LIMIT_SIGNAL}":
            return None
        job = self._seen[0]
        return (job.time_limit if job is not None and job.time_limit else None) or str(self.spec.time_limit)

    def job(self, run: RunView) -> JobInfo | None:
        """The current attempt's job as Slurm shows it (None: not submitted, or forgotten)."""
        job_id = self.job_id(run)
        return self.probe(run, job_id)[0] if job_id else None

    def stop(self, run: RunView, *, grace_s: float) -> StopReport:
        """``scancel``, then wait until Slurm reports every process of the job ended."""
        job_id, host = self.job_id(run), self.spec.host
        if job_id is None:
            return StopReport()
        try:
            job, _ = self.probe(run, job_id)
            if job is not None and not job.phase.ended:
                self._login().run(["scancel", job_id], timeout=60).check(
                    f"scancel {job_id} failed", "Check the login host, then stop again.")
            deadline = time.time() + grace_s + STOP_WAIT_S
            while job is not None and not job.phase.ended:
                if time.time() > deadline:
                    raise HostError(host, f"Slurm job {job_id} is still {job.state} on {job.nodes}",
                                    "Ask the cluster's administrator about those nodes, then stop again.")
                time.sleep(0.5)
                job, _ = self.probe(run, job_id)
        except HostError as err:
            return StopReport({host: err}, [] if "still" in err.problem else [host])
        return StopReport()

    def log_tail(self, run: RunView, task: str, max_bytes: int) -> str:
        adopted = self._record(run).get("adopted")
        # A link to the rank's srun output; an adopted job has only its own StdOut.
        path = adopted["stdout"] if adopted else layout.log_file(self._run_dir(run), task)
        result = self._login().run(["tail", "-c", str(max_bytes), path], timeout=30)
        return result.stdout if result.ok else ""

    def chief_transport(self, run: RunView):
        return self._login()

    def gpu_fan_out(self, run: RunView):
        """Monitor's GPU watch on every node of the current job: wraps the watch agent's command
        (run on the login host) in an ``srun`` step of one task per node that overlaps the job's
        own (``--overlap``: it takes no CPU, memory or GPU from them, and a step is given the
        job's GPUs on its node, so nvidia-smi sees what the job's tasks use). Raises while the job
        does not run: Monitor asks again later, and a restart's new job is found the same way."""
        def wrap(argv: list[str]) -> list[str]:
            job = self.job(run)
            if job is None or job.phase != SlurmPhase.RUNNING or not job.nodes:
                raise HostError(self.spec.host, "the Slurm job does not run yet: no node to watch",
                                "Monitor reads the nodes' GPUs once Slurm starts the job.")
            return ["srun", f"--jobid={job.job_id}", "--overlap", f"--nodelist={job.nodes}",
                    "--ntasks-per-node=1", "--quiet", "--", *argv]
        return wrap


def adopt(cluster: SlurmSpec, job_id: str, *, store, options=None) -> RunState:
    """A run record for a Slurm job the console did not submit: status, logs and stop work on it.

    Its tasks are counted from Slurm's NumTasks; logs are the job's own StdOut; no restart
    policy (the console cannot resume a job whose checkpoints it does not know).
    """
    if not job_id.isdigit():
        raise ConsoleError(f"Slurm job id {job_id!r} is not a number", "Give the id squeue shows, e.g. 4242.")
    with Pool(options) as pool:
        login = pool.transport(cluster.login())
        fields = scontrol_fields(login.run(["scontrol", "show", "job", "-o", job_id], timeout=60).stdout)
    if not fields:
        raise ConsoleError(f"Slurm does not know job {job_id} (asked on {cluster.host})",
                           "Check the id with `squeue` on the login host; a job that ended long ago is forgotten.")
    tasks = max(1, int(fields.get("NumTasks", "1") or 1))
    cluster = replace(cluster, nodes=1, tasks_per_node=tasks)
    view = cluster.as_cluster()
    run_id = check_run_id(f"slurm-{job_id}")
    local_dir = store.reserve(run_id)
    work = fields.get("WorkDir", ".")
    command = JobSpec(kind=JobKind.COMMAND, command=(fields.get("Command") or f"slurm job {job_id}",))
    state = RunState(run_id, time.time(), slurm_to_dict(cluster), job_to_dict(command),
                     [TaskState(n, i, t.host, work) for i, (n, t) in enumerate(zip(view.task_names(), view.tasks))],
                     [Attempt(1, time.time())], Phase.RUNNING, owner=identity.current().as_dict())
    store.save(state)
    write_private(local_dir / JOBS_FILE, json.dumps({"jobs": {"1": job_id},
                                                     "adopted": {"stdout": fields.get("StdOut", "")}}))
    return state   # `launcher.attach(state.run_id)` gives the Run handle
