"""Checkpoints the console lists, exports and restores: the harness's layout and metadata.

``tf.train.Checkpoint(model=..., optimizer=..., step=...)`` written as DIR/ckpt-<S>.* with
DIR/ckpt-<S>.meta.json next to it, then the harness's retention (last N, held steps kept).
Every worker must call ``save`` at the same step: the chief writes RUN/checkpoints/, the
others their own complete copy (docs/facts.md #5), so resume needs no shared storage.
"""
from __future__ import annotations

import os
import time

from .harness import ckpt_index, layout, retention
from .reporting import checkpoint_dir, context



def save(checkpoint, step: int, *, epoch: int, losses: dict, keep: int = 5,
         versions: dict | None = None, metrics: dict | None = None, keep_best: int = 0,
         best_metric: str = "loss", best_mode: str = "min") -> str | None:
    """Write ``checkpoint`` at ``step`` with its metadata; None outside a run. ``metrics``:
    every metric's global value at this step, kept in the metadata (the Checkpoints page shows
    them; keep-best by ``best_metric``, ``best_mode`` "min" or "max", reads them)."""
    directory = checkpoint_dir()
    if directory is None:
        return None
    os.makedirs(directory, exist_ok=True)
    policy = retention.Policy(keep_last=int(keep), keep_best=int(keep_best), grace_s=30.0,
                              best_metric=best_metric, best_mode=best_mode)
    retention.write_policy(directory, policy)
    meta = ckpt_index.meta_path(directory, step)
    if os.path.exists(meta):   # an older attempt's meta would make a half-written save look complete
        os.unlink(meta)
    checkpoint.save_counter.assign_add(1)
    path = checkpoint.write(ckpt_index.prefix_path(directory, step))
    write_meta(directory, step, epoch=epoch, losses=losses, metrics=metrics, versions=versions)
    retention.apply(directory, policy)
    return path


def write_meta(directory: str, step: int, **meta) -> None:
    """ckpt_index.write_meta: the metadata's one writer."""
    ckpt_index.write_meta(directory, step, **meta)


def restore(checkpoint, step: int) -> dict:
    """Restore ``step`` from this worker's own folder; say so in tasks/<task>.resumed (the
    console's Restore waits for it). Returns the checkpoint's metadata."""
    ctx = context()
    directory = checkpoint_dir()
    complete = {c["step"]: c for c in ckpt_index.list_complete(directory)}
    if step not in complete:
        raise RuntimeError(f"tfconsole: checkpoint step {step} is not complete in {directory} "
                           f"(complete: {sorted(complete) or 'none'}); pick one of those in the "
                           "console's Checkpoints page")
    checkpoint.restore(complete[step]["prefix"]).expect_partial()
    os.makedirs(os.path.join(ctx.run_dir, layout.TASKS), exist_ok=True)
    ckpt_index.write_json_atomic(layout.task_file(ctx.run_dir, ctx.task, "resumed"), {
        "attempt": ctx.attempt, "step": int(step), "time": time.time()})
    return complete[step]
