"""Checkpoints on every worker: the chief into RUN/checkpoints, others into their own folder.

Every worker takes part in every save (a save can hold a collective; a worker that skips it can
deadlock the others), and every worker holds a full copy of the variables, so each folder is
complete on its own and resume needs no shared storage.
"""
from __future__ import annotations

import os
import shutil
import time

import keras
import tensorflow as tf

from . import ckpt_index
from . import layout
from . import retention


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message names the ones that can."""


def checkpoint_dir(run: str, task: str, is_chief: bool) -> str:
    if is_chief:
        return os.path.join(run, layout.CHECKPOINTS)
    return layout.worker_checkpoint_dir(run, task)


def describe_available(directory: str) -> str:
    steps = [c["step"] for c in ckpt_index.list_complete(directory)]
    return f"complete checkpoints in {directory}: {steps or 'none'}"


class Checkpointer:
    """tf.train.Checkpoint(model, optimizer, step) + meta files + our own retention.

    Not CheckpointManager: its max_to_keep deletes a checkpoint that an export or a restore is
    using. ``retention.apply`` keeps the last N, the best K and every held step instead.
    """

    def __init__(self, directory: str, model, optimizer, step_var, policy: retention.Policy):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        # A save cut off in an earlier attempt (killed mid-write) left its temporary folder; no
        # other process writes here now (the attempt's tasks were stopped before this one began).
        for leftover in ckpt_index.temp_folders(directory):
            shutil.rmtree(leftover, ignore_errors=True)
        self.step_var = step_var
        self.policy = policy
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
        retention.write_policy(directory, policy)   # listings show what this retention keeps

    def save(self, step: int, epoch: int, losses: dict, metrics: dict) -> str:
        """Save at ``step`` (all workers must call this at the same step), then write meta.
        ``metrics``: the global value of every metric at this step, the loss among them
        (keep-best reads them)."""
        self.step_var.assign(step)
        # A leftover meta from an earlier attempt would make a half-written save look complete.
        meta = ckpt_index.meta_path(self.directory, step)
        if os.path.exists(meta):
            os.unlink(meta)
        # What CheckpointManager.save did, minus its deletions: bump save_counter (older
        # checkpoints hold it, so restores match either way), then write ckpt-<step>.*.
        self.checkpoint.save_counter.assign_add(1)
        prefix = ckpt_index.prefix_path(self.directory, step)
        try:
            path = self.checkpoint.write(prefix)
        except BaseException:
            # A full disk (ENOSPC), say: what the failed save wrote can never be used (no meta
            # file), and on a full disk it holds the very space that is missing.
            ckpt_index.remove_partial(self.directory, step)
            raise
        ckpt_index.write_meta(self.directory, step, epoch=epoch, losses=losses, metrics=metrics,
                              versions={"tensorflow": tf.__version__, "keras": keras.__version__})
        retention.apply(self.directory, self.policy)
        return path

    def restore(self, step: int) -> int:
        """Restore ``step`` from this worker's own folder; return the restored step counter."""
        complete = {c["step"]: c for c in ckpt_index.list_complete(self.directory)}
        if step not in complete:
            raise CheckpointError(
                f"checkpoint step {step} is not complete on this worker; "
                f"{describe_available(self.directory)}")
        self.checkpoint.restore(complete[step]["prefix"]).assert_existing_objects_matched()
        restored = int(self.step_var.numpy())
        if restored != step:
            raise CheckpointError(f"checkpoint ckpt-{step} holds step {restored}")
        return restored

    def latest_step(self) -> int | None:
        complete = ckpt_index.list_complete(self.directory)
        return complete[-1]["step"] if complete else None
