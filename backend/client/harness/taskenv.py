"""The environment every task of a run starts with: one spelling of each name. Standard library only.

What a job may read is in docs/job-contract.md. Set by the engines (backend/engines/direct.py over
SSH; backend/engines/slurm_script.py, then slurm_task.py on each Slurm rank) and, for a shrunk run,
by backend/runs/membership.py; read by the harness (train.py, loop.py, spawn.py) and by the client
library (tfconsole.context, which loads this file from the run's harness/).
"""
from __future__ import annotations

RUN_DIR = "TFCONSOLE_RUN_DIR"          # the run folder on this host
RUN_ID = "TFCONSOLE_RUN_ID"
ATTEMPT = "TFCONSOLE_ATTEMPT"          # the launch is attempt 1; every restart, resume or Restore adds 1
TASK = "TFCONSOLE_TASK"                # chief-0, worker-1: the name this task's files carry
IS_CHIEF = "TFCONSOLE_IS_CHIEF"        # "1" or "0"
RESUME_STEP = "TFCONSOLE_RESUME_STEP"  # the checkpoint step to restore; empty: start afresh

# A shrunk attempt's: the run's job carries them from the shrink on, so every later attempt (a
# restart, a Restore) gets them too.
SHRINK = "TFCONSOLE_SHRINK"                        # restart.shrink's value
LAUNCH_REPLICAS = "TFCONSOLE_LAUNCH_REPLICAS"      # replicas the run was launched with
REPLICAS = "TFCONSOLE_REPLICAS"                    # replicas this attempt runs on
LR_SCALE = "TFCONSOLE_LR_SCALE"                    # multiply the learning rate by this
GLOBAL_BATCH_SIZE = "TFCONSOLE_GLOBAL_BATCH_SIZE"  # the global batch this attempt uses (harness jobs)

# Every process of a task, even one that left its group (setsid): "<abs run dir>:<task>", how a
# stop finds them all (spawn.py sets it, proctree.py looks for it).
GROUP = "TFCONSOLE_GROUP"


def resume_value(step: int | None) -> str:
    """RESUME_STEP's value: the step, or empty for a task that starts afresh."""
    return "" if step is None else str(step)
