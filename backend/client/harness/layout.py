"""Where things live inside one run directory, on any host. Standard library only.

A run directory is ``<workdir>/runs/<run_id>/`` on each host, and ``runs/<run_id>/`` locally.
Every path that one task writes carries the task's name, so hosts that share a filesystem
(loopback test hosts, an NFS home) never write the same file.
"""
from __future__ import annotations

import os
import time

LIB = "lib"                    # the shipped package: lib/tfconsole/ (client and harness) and
                               # lib/__main__.py, its entry (``host_argv``); on jobs' PYTHONPATH
PACKAGE = "tfconsole"          # the package's one name on a host
JOB = "job"                    # copied job module
TASKS = "tasks"                # <task>.json (pid, pgid, argv, start), <task>.exit (exit code)
LOGS = "logs"                  # <task>.log: the task's stdout and stderr, raw
METRICS = "metrics.jsonl"      # written by the chief: one JSON line per worker every K steps
TRAIN_INFO = "train.json"      # written by the chief at each attempt's start (train_info.py)
CHECKPOINTS = "checkpoints"    # the chief's checkpoints: the real ones
MODEL_CONFIG = "model.json"     # in checkpoints/: a fit job's architecture (tfconsole), for export
WORKER_CHECKPOINTS = "worker_checkpoints"  # <task>/: every other worker's own complete copy
REQUESTS = "requests"          # save-now requests, read by the chief
EXPORTS = "exports"            # <name>/ with saved_model/, model.keras, result.json
TENSORBOARD = "tensorboard"
STACKS = "stacks"              # <task>.txt: Python stacks a task writes on SIGUSR1 (faulthandler)
TMP = "tmp"                    # <task>/: the task's TMPDIR, removed once the task's processes are gone
STATE = "state.json"           # the local run directory's persisted run state
SLURM_RANK_LOG = "slurm-task-{rank}.log"   # in logs/: srun --output of rank N; logs/<task>.log links to it


def host_argv(python: str, run: str, command: str, *args: str, site: bool = False) -> list[str]:
    """``python -S RUN/lib COMMAND ARGS``: one of the package's commands (``tfconsole/__main__.py``)
    from the run's own copy. ``site=False`` adds ``-S`` (standard-library commands start faster)."""
    return [python, *(() if site else ("-S",)), f"{run}/{LIB}", command, *args]


def task_name(role: str, index: int) -> str:
    """``chief-0``, ``worker-1``: the name every file of a task carries."""
    return f"{role}-{index}"


def path_arg(path: str) -> str:
    """``path`` as it goes on a command line: a relative path starting with '-' gets "./", so
    python, mkdir, tar or srun never read it as an option ("-c<code>" would run as code)."""
    return f"./{path}" if path.startswith("-") else path


def run_dir(workdir: str, run_id: str) -> str:
    return path_arg(os.path.join(workdir, "runs", run_id))


def task_file(run: str, task: str, suffix: str) -> str:
    return os.path.join(run, TASKS, f"{task}.{suffix}")


def log_file(run: str, task: str) -> str:
    return os.path.join(run, LOGS, f"{task}.log")


def task_tmp(run: str, task: str) -> str:
    """The task's temporary folder (its TMPDIR), absolute: TensorFlow's autograph writes
    ``__autograph_generated_file*.py`` there and removes them only at a normal exit, which the
    harness and the client skip (``os._exit``); in the host's /tmp, every run left thousands."""
    return os.path.join(os.path.abspath(run), TMP, task)


def fresh_task_tmp(run: str, task: str) -> str:
    """``task_tmp``, emptied of an earlier attempt's files and made."""
    remove_task_tmp(run, task)
    os.makedirs(task_tmp(run, task))
    return task_tmp(run, task)


def remove_task_tmp(run: str, task: str) -> None:
    import shutil   # here, not at the top: the harness's imports are being restructured
    shutil.rmtree(task_tmp(run, task), ignore_errors=True)


# What the supervisor (spawn.py, slurm_task.py on Slurm) writes first in a task's log for each
# attempt, so diagnosis (backend/diagnosis/diagnose.py) reads a restarted run's log one attempt at
# a time.
ATTEMPT_BANNER = "=== tfconsole attempt "


def attempt_banner(attempt: str) -> str:
    """``=== tfconsole attempt 2 2026-11-27 10:00:00 ===``: an attempt's first line in its log."""
    return f"{ATTEMPT_BANNER}{attempt} {time.strftime('%Y-%m-%d %H:%M:%S')} ==="


def stacks_file(run: str, task: str) -> str:
    return os.path.join(run, STACKS, f"{task}.txt")


def worker_checkpoint_dir(run: str, task: str) -> str:
    return os.path.join(run, WORKER_CHECKPOINTS, task)
