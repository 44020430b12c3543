"""The batch script ``sbatch`` runs for one attempt (pure; the console shows it as a preview).

One ``srun`` step starts one task per worker: each runs ``python -S RUN/lib slurm_task run``
(``backend.client.harness.slurm_task``), which builds its TF_CONFIG from the step's ``SLURM_*``
variables and runs the harness command unchanged.
``--distribution=block`` fixes which rank lands on which node (slurm_env.py relies on it);
``--kill-on-bad-exit`` ends the step when one task fails, because under
MultiWorkerMirroredStrategy its peers can only abort or hang. ``--requeue``: when the cluster
requeues the job (an administrator, a preemption under ``PreemptMode=REQUEUE``, a node failure),
Slurm runs this script again under the same job id with ``SLURM_RESTART_COUNT`` set; the script
then resumes from the newest checkpoint every task holds, as the next attempt (``slurm_task.py
requeue``), and the console records that attempt on the same job. A failure the console restarts
is its own resubmission, a new job. ``--signal=USR2@<s>``:
ahead of the time limit Slurm sends every task SIGUSR2 (USR1 is the harness's stack dump), and
every worker saves the step it is at and exits 75 (harness/preempt.py); the keeper resumes from
that step. The lead is the job's ``preempt_grace_s`` (Slurm may send it up to a minute early;
after the limit, TERM and KillWait still follow). Every value is quoted for the shell, and the
option values were allow-listed by the spec.
"""
from __future__ import annotations

import math
import re
import shlex

from backend.engines.direct import task_argv, task_cwd   # the same harness command line as on SSH hosts
from backend.errors import SpecError
from backend.client.harness.contract import layout, preempt, taskenv
from backend.config.slurm_spec import FLAG_OPTIONS, SlurmSpec
from backend.config.spec import JobKind, JobSpec

BATCH_LOG = "slurm-batch-%j.log"   # the batch script's own output, per Slurm job id


def script_path(run_dir: str, attempt: int) -> str:
    return f"{run_dir}/slurm/attempt-{attempt}.sbatch"


# sbatch splits an #SBATCH line into words itself (no shell quoting) and reads '%' in --output
# as a pattern, so the run folder in those lines must be one plain word (the spec's workdir is).
_SBATCH_WORD = re.compile(r"[^\s'\"\\%]+")


# The signal Slurm sends ahead of the time limit (and nothing else we ask it for): a preemption
# record naming it means the job ran out of time, not that another job took its nodes.
TIME_LIMIT_SIGNAL = "USR2"


def signal_lead_s(job: JobSpec) -> int:
    """Seconds ahead of the time limit for the save signal: the job's save grace (the Keras
    callback's default for command jobs, whose grace the console cannot see)."""
    grace = job.params.get("preempt_grace_s") if job.kind == JobKind.HARNESS else None
    return max(1, math.ceil(float(grace or preempt.DEFAULT_GRACE_S)))


def sbatch_options(spec: SlurmSpec, *, run_id: str, run_dir: str, signal_lead_s: int) -> list[str]:
    if not _SBATCH_WORD.fullmatch(run_dir):
        raise SpecError("workdir", f"{run_dir!r} cannot go on an #SBATCH line (spaces, quotes, '\\' or '%')",
                        "Use a workdir of letters, digits, '/', '.', '_' and '-'.")
    opts = [f"--job-name=tfconsole-{run_id}", f"--nodes={spec.nodes}",
            f"--ntasks-per-node={spec.tasks_per_node}", f"--cpus-per-task={spec.cpus_per_task}",
            f"--time={spec.time_limit}", f"--output={run_dir}/{layout.LOGS}/{BATCH_LOG}", "--requeue",
            f"--signal={TIME_LIMIT_SIGNAL}@{signal_lead_s}"]
    for name in ("partition", "account", "qos"):
        if getattr(spec, name):
            opts.append(f"--{name}={getattr(spec, name)}")
    if spec.gpus_per_task:
        opts.append(f"--gpus-per-task={spec.gpus_per_task}")
    for key, value in spec.extra.items():
        opts.append(f"--{key}" if key in FLAG_OPTIONS else f"--{key}={value}")
    return opts


def batch_script(spec: SlurmSpec, job: JobSpec, *, run_dir: str, run_id: str, attempt: int,
                 resume_step: int | None) -> str:
    """The whole script. ``run_dir`` is relative to home (sbatch runs there) or absolute."""
    run_dir = layout.path_arg(run_dir)   # never an option of python, srun or mkdir
    env = {**job.env, taskenv.RUN_DIR: run_dir, taskenv.RUN_ID: run_id,
           taskenv.ATTEMPT: str(attempt), "PYTHONUNBUFFERED": "1",
           taskenv.RESUME_STEP: taskenv.resume_value(resume_step)}
    if not spec.gpus_per_task:   # CPU only: no task may grab a GPU by accident
        env["CUDA_VISIBLE_DEVICES"] = ""
    resumed = "from scratch" if resume_step is None else f"resuming from step {resume_step}"
    task = [*layout.host_argv(spec.python, run_dir, "slurm_task"), "run",
            "--run-dir", run_dir, "--tf-port", str(spec.tf_port),
            *(["--cwd", cwd] if (cwd := task_cwd(job, run_dir)) else []), "--",
            *task_argv(job, spec.login(), run_dir, run_id, attempt, resume_step)]
    requeue = [*layout.host_argv(spec.python, run_dir, "slurm_task"), "requeue",
               "--run-dir", run_dir, "--attempt", str(attempt),
               *[a for name in spec.task_names() for a in ("--task", name)]]
    srun = ["srun", "--distribution=block", "--kill-on-bad-exit=1", "--open-mode=append",
            f"--output={run_dir}/{layout.LOGS}/{layout.SLURM_RANK_LOG.format(rank='%t')}"]
    lines = ["#!/bin/bash",
             f"# tfconsole run {run_id}, attempt {attempt}, {resumed}: {spec.num_tasks} tasks, "
             "one per worker; rank 0 is the chief.",
             *[f"#SBATCH {opt}" for opt in sbatch_options(spec, run_id=run_id, run_dir=run_dir,
                                                                 signal_lead_s=signal_lead_s(job))],
             "",
             *[f"export {key}={shlex.quote(value)}" for key, value in env.items()],
             f"mkdir -p -- {shlex.quote(f'{run_dir}/{layout.LOGS}')}",
             "# Slurm requeued this job and runs it again: resume from the newest checkpoint every",
             "# task holds, as the next attempt (slurm/requeued.json tells each task and the console).",
             'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
             "  " + shlex.join(requeue) + " || exit 1",
             "fi",
             "# Each task builds its TF_CONFIG from SLURM_PROCID, SLURM_STEP_NODELIST and",
             "# SLURM_STEP_TASKS_PER_NODE; slot k on a node listens on --tf-port + k.",
             shlex.join(srun) + " \\",
             "  " + shlex.join(task),
             ""]
    return "\n".join(lines)


def preview(spec: SlurmSpec, job: JobSpec) -> str:
    """The script as the first attempt of a new run would get it (run id shown as RUN_ID)."""
    return batch_script(spec, job, run_dir=layout.run_dir(spec.workdir, "RUN_ID"), run_id="RUN_ID",
                        attempt=1, resume_step=None)
