"""Validation on every worker at one step: ``make_val_dataset``, ``val_every``, ``val_steps``.

Every worker reads ``val_steps`` batches per replica of its own shard of the job's validation
data, with the weights of that step (after its update), and adds up the loss and each metric as
total and count of examples (rows.py). The last batch's step gathers every replica's state in
one all_gather: the only collective a validation adds. So each worker's value is its own
(local state) and the global value is the summed state, which equals the value a plain model
would compute over all the workers' validation examples together.

The dataset is made once: ``take(val_steps)`` of it, repeated, so every validation reads the
same examples (when the job's dataset is deterministic) and never meets the dataset's end (an
end would put a "do you still have data?" collective into every batch).
"""
from __future__ import annotations

import numpy as np

from . import jobs
from . import loop
from . import rows


def every(params: dict, steps_per_epoch: int) -> int:
    """Steps between validations: ``val_every``, or each epoch end when it is 0."""
    return int(params["val_every"]) or int(steps_per_epoch)


class Validator:
    def __init__(self, strategy, model, job, metric_names: list[str], *, per_replica: int,
                 seed: int, steps: int):
        self.strategy, self.steps = strategy, int(steps)
        self.layout = rows.val_layout(metric_names)
        replicas_per_pipeline = None

        def fn(ctx):
            nonlocal replicas_per_pipeline
            replicas_per_pipeline = max(1, ctx.num_replicas_in_sync // ctx.num_input_pipelines)
            ds = job.make_val_dataset(ctx, per_replica, seed)
            _check_long_enough(ds, self.steps * replicas_per_pipeline)
            return ds.take(self.steps * replicas_per_pipeline).repeat()

        self.iterator = iter(strategy.distribute_datasets_from_function(fn))
        self.eval_step, self.eval_step_gather = loop.make_eval_steps(
            strategy, model, job.loss_fn, self.layout,
            metrics_fn=getattr(job, "metrics_fn", None))

    def run(self, task_index: int, tasks: tuple) -> rows.Folded:
        """Validate now (every worker at the same step); per-task and global values, named
        ``val_<metric>``."""
        width = len(self.layout.state_cols)
        state = np.zeros(width)
        for _ in range(self.steps - 1):
            state += loop.window_state(self.strategy, [self.eval_step(self.iterator)], width)
        # The earlier batches, averaged over this worker's replicas (window_state): each
        # replica adds its own last batch, and the worker's rows sum to its state (rows.py).
        values = {"task_index": task_index, **loop.state_values(self.layout, state)}
        found = loop.gather_rows(self.strategy, self.eval_step_gather, self.iterator,
                                 self.layout, values)
        folded = rows.fold(found, tasks, self.layout)
        prefix = rows.VAL_PREFIX
        return rows.Folded(
            values={t: {prefix + k: v for k, v in vals.items()} for t, vals in folded.values.items()},
            global_={prefix + k: v for k, v in folded.global_.items()}, rows=folded.rows)


def _check_long_enough(ds, needed: int) -> None:
    n = int(ds.cardinality())
    if 0 <= n < needed:
        raise jobs.JobError(
            f"make_val_dataset gives {n} batches on this worker and val_steps needs {needed}: "
            "lower val_steps, or repeat the validation data")
