"""One Slurm task: ``srun ... python -S RUN/lib slurm_task run --run-dir RUN --tf-port P -- ARGV``.

The batch script starts this on every task of its ``srun`` step. It builds the task's
TF_CONFIG from the step's ``SLURM_*`` variables (slurm_env.py, with the same builder the console
uses for SSH hosts), runs ARGV (the harness, unchanged) with it, and keeps the files every other
part of the console reads in the run directory: ``tasks/<task>.json`` (pid, node),
``tasks/<task>.exit`` (exit code) and ``logs/<task>.log`` (a link to the log ``srun --output``
writes for this rank). ``probe`` answers the console's status poll in one command.

When Slurm requeues the job (an administrator's ``scontrol requeue``, a preemption under
``PreemptMode=REQUEUE``, a node failure), it runs the same batch script again with
``SLURM_RESTART_COUNT`` set. The script then runs ``requeue`` once, before its ``srun``: it finds
the newest checkpoint every task holds complete (the run folder is shared) and writes it, with the
new attempt's number, to ``slurm/requeued.json``; each task's ``run`` reads that record and starts
the job from that step as that attempt, instead of the step the script was written with.
Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time


from . import ckpt_index, layout, preempt, slurm_env, taskenv
from .spawn import _read, _write_atomic, run_paths_absolute   # as spawn.py does


def _link_log(run: str, name: str, rank: int) -> None:
    """``logs/<task>.log`` -> this rank's srun output, so every reader finds it by task name."""
    link = layout.log_file(run, name)
    tmp = f"{link}.{os.getpid()}.tmp"
    os.symlink(layout.SLURM_RANK_LOG.format(rank=rank), tmp)
    os.replace(tmp, link)


# Slurm signals every process of the step: TERM on scancel or a time limit, USR2 ahead of the
# limit (the batch script's --signal). This wrapper outlives them all. The job gets TERM and INT
# back at their defaults but USR2 stays ignored: the harness and the Keras callback install their
# own handler (save, then exit 75), and a job without one (or not yet set up) trains on to the
# limit as before instead of dying 25 s early from USR2's default action.
_OUTLIVED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


REQUEUED = "slurm/requeued.json"   # in the run folder: what the requeued job's re-run resumes from


def restart_count() -> int:
    """How often Slurm has requeued this job (0: its first run)."""
    value = os.environ.get("SLURM_RESTART_COUNT", "")
    return int(value) if value.isdigit() else 0


def common_step(run_dir: str, tasks: list[str]) -> int | None:
    """The newest step every task holds complete: the chief's (the first task) in checkpoints/,
    every other task's in its own folder, as the console's ``common_checkpoint`` reads them."""
    held = []
    for i, name in enumerate(tasks):
        folder = (os.path.join(run_dir, layout.CHECKPOINTS) if i == 0
                  else layout.worker_checkpoint_dir(run_dir, name))
        held.append({c["step"] for c in ckpt_index.list_complete(folder)})
    common = set.intersection(*held) if held else set()
    return max(common) if common else None


def requeue(run_dir: str, attempt: int, tasks: list[str]) -> dict:
    """The batch script's re-run after a requeue: the attempt it now is (the submitted attempt
    plus Slurm's restart count) and the step it resumes from, kept for every task and the console."""
    restarts = restart_count()
    record = {"job": os.environ.get("SLURM_JOB_ID"), "restart": restarts, "attempt": attempt + restarts,
              "resume_step": common_step(run_dir, tasks), "time": time.time()}
    os.makedirs(os.path.dirname(os.path.join(run_dir, REQUEUED)), exist_ok=True)
    _write_atomic(os.path.join(run_dir, REQUEUED), json.dumps(record))
    print(f"tfconsole: Slurm requeued job {record['job']} (restart {restarts}): attempt "
          f"{record['attempt']} resumes from "
          f"{'scratch' if record['resume_step'] is None else 'step ' + str(record['resume_step'])}", flush=True)
    return record


def requeued_record(run_dir: str) -> dict | None:
    """This re-run's record (None on the job's first run); raises if the batch script wrote none."""
    restarts = restart_count()
    if not restarts:
        return None
    record = json.loads(_read(os.path.join(run_dir, REQUEUED)) or "{}")
    if record.get("job") != os.environ.get("SLURM_JOB_ID") or record.get("restart") != restarts:
        raise RuntimeError(f"requeued job {os.environ.get('SLURM_JOB_ID')} (restart {restarts}) finds "
                           f"no record of its own in {REQUEUED}: {record}")
    return record


def resumed_argv(argv: list[str], attempt: int, resume_step: int | None) -> list[str]:
    """The harness command line as this attempt's (``--attempt``, ``--resume-step``); any other
    command is unchanged: a command job reads them from its environment (taskenv)."""
    if len(argv) < 3 or not (argv[1].endswith(f"/{layout.LIB}") and argv[2] == "train"):
        return argv
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--resume-step":
            i += 2
            continue
        out.append(argv[i])
        if argv[i] == "--attempt" and i + 1 < len(argv):
            out.append(str(attempt))
            i += 1
        i += 1
    return out + ([] if resume_step is None else ["--resume-step", str(resume_step)])


def run(run_dir: str, tf_port: int, argv: list[str], cwd: str | None = None) -> int:
    record = requeued_record(run_dir)
    if record is not None:   # a re-run after Slurm requeued the job: a new attempt, resumed
        os.environ[taskenv.ATTEMPT] = str(record["attempt"])
        os.environ[taskenv.RESUME_STEP] = taskenv.resume_value(record["resume_step"])
        argv = resumed_argv(argv, record["attempt"], record["resume_step"])
    name, config = slurm_env.tf_config_for(dict(os.environ), tf_port)
    rank = int(os.environ["SLURM_PROCID"])
    for sub in (layout.TASKS, layout.LOGS):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    exit_file = layout.task_file(run_dir, name, "exit")
    if os.path.exists(exit_file):
        os.remove(exit_file)
    _link_log(run_dir, name, rank)
    print(f"{layout.attempt_banner(os.environ.get(taskenv.ATTEMPT, '?'))} {name} on {socket.gethostname()} "
          f"TF_CONFIG={json.dumps(config)}", flush=True)
    # This wrapper outlives TERM and USR2 so it can record the harness's exit code (KILL, after
    # KillWait, ends both); USR2's default would end it and srun would kill the saving harness.
    for sig in _OUTLIVED:
        signal.signal(sig, signal.SIG_IGN)
    lib = os.path.abspath(os.path.join(run_dir, layout.LIB))   # `import tfconsole` in the job
    env = {**os.environ, "TF_CONFIG": json.dumps(config), taskenv.TASK: name,
           taskenv.IS_CHIEF: "1" if rank == 0 else "0",
           "PYTHONPATH": os.pathsep.join(p for p in (lib, os.environ.get("PYTHONPATH")) if p),
           "TMPDIR": layout.fresh_task_tmp(run_dir, name)}   # as spawn.start: gone with the task
    if cwd:   # a job's shipped files (RUN/job): the run's paths must not depend on where it starts
        env = run_paths_absolute(env)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, preexec_fn=_default_signals)
    _write_atomic(layout.task_file(run_dir, name, "json"), json.dumps({
        "pid": proc.pid, "pgid": os.getpgid(0), "node": socket.gethostname(), "rank": rank,
        "job": os.environ.get("SLURM_JOB_ID"), "started": time.time(), "tf_config": config}))
    code = proc.wait()
    _write_atomic(exit_file, f"{code}\n")
    layout.remove_task_tmp(run_dir, name)   # a scancel's KILL skips it: the files stay in the run folder
    if code == preempt.EXIT_CODE:
        # Saved on the signal: every peer saved the same step and is exiting 75 too. srun's
        # --kill-on-bad-exit would KILL a peer that is a moment behind (seen: the chief killed
        # after its save, before its exit code), so srun sees 0; the exit file keeps 75.
        return 0
    return code if code >= 0 else 128 - code


def _queue(scontrol_out: str) -> list[str] | None:
    """While the job waits: the ids of its partition's pending jobs, in Slurm's order (highest
    priority first, then oldest), so the console can say its place. None when it does not wait."""
    if " JobState=PENDING " not in f" {scontrol_out} ":
        return None
    partition = re.search(r"(?:^|\s)Partition=(\S+)", scontrol_out)
    argv = ["squeue", "-h", "-t", "PENDING", "-o", "%i", "--sort=-p,i"]
    try:
        sq = subprocess.run(argv + (["-p", partition.group(1)] if partition else []), capture_output=True,
                            text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sq.stdout.split() if sq.returncode == 0 else None


def probe(run_dir: str, job: str, names: list[str]) -> dict:
    """``scontrol show job -o``, the queue while the job waits, and every task's files, for one
    status poll."""
    try:
        sc = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                            timeout=30)
        scontrol = {"code": sc.returncode, "out": sc.stdout, "err": sc.stderr}
    except (OSError, subprocess.TimeoutExpired) as err:
        scontrol = {"code": 127, "out": "", "err": f"scontrol: {err}"}
    tasks = {}
    for name in names:
        info, code = _read(layout.task_file(run_dir, name, "json")), _read(layout.task_file(run_dir, name, "exit"))
        try:
            found = {"info": json.loads(info) if info else None, "exit": int(code) if code and code.strip() else None}
        except ValueError:   # a file being written: the next poll reads it whole
            found = {"info": None, "exit": None}
        if str((found["info"] or {}).get("job", job)) != str(job):
            # An earlier job's files (a Restore submits a new job into the same run folder): its
            # exit code 0 read as this job's made a restored attempt "finished" before its tasks
            # started, and the keeper cancelled it. This job's wrapper replaces them as it starts.
            found = {"info": None, "exit": None}
        if found["exit"] is not None:   # how long ago, on this host's clock
            try:
                found["ended_ago_s"] = max(0.0, time.time() - os.stat(layout.task_file(run_dir, name, "exit")).st_mtime)
            except OSError:
                pass
        tasks[name] = found
    try:
        requeued = json.loads(_read(os.path.join(run_dir, REQUEUED)) or "null")
    except ValueError:
        requeued = None
    return {"scontrol": scontrol, "tasks": tasks, "queue": _queue(scontrol["out"]), "requeued": requeued}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--run-dir", required=True)
    r.add_argument("--tf-port", type=int, required=True)
    r.add_argument("--cwd", default=None, help="the folder the job runs in (its shipped files)")
    r.add_argument("argv", nargs=argparse.REMAINDER)
    q = sub.add_parser("probe")
    q.add_argument("--run-dir", required=True)
    q.add_argument("--job", required=True)
    q.add_argument("--task", action="append", default=[])
    rq = sub.add_parser("requeue", help="in the batch script, when Slurm runs it again")
    rq.add_argument("--run-dir", required=True)
    rq.add_argument("--attempt", type=int, required=True, help="the attempt the job was submitted as")
    rq.add_argument("--task", action="append", default=[], help="every task, the chief first")
    a = p.parse_args(argv)
    if a.cmd == "requeue":
        requeue(a.run_dir, a.attempt, a.task)
        return 0
    if a.cmd == "probe":
        print(json.dumps(probe(a.run_dir, a.job, a.task)))
        return 0
    command = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    return run(a.run_dir, a.tf_port, command, a.cwd)


if __name__ == "__main__":
    sys.exit(main())
