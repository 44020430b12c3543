"""What the chief writes at each sync point: the metrics lines and TensorBoard's scalars."""
from __future__ import annotations

import math
import os
import time

from . import layout
from . import report
from . import rows
from . import step_probe
from . import tb


class ChiefWriter:
    def __init__(self, run_dir: str, run_id: str, attempt: int, tasks: tuple,
                 layout_: rows.Layout, *, validation: bool):
        self.tasks, self.layout = tasks, layout_
        self.reporter = report.MetricsReporter(run_dir, run_id, attempt)
        folder = os.path.join(run_dir, layout.TENSORBOARD)
        self.tb = tb.ScalarWriter(folder)
        self.tb_val = tb.ScalarWriter(os.path.join(folder, tb.VALIDATION)) if validation else None

    def write(self, step, epoch, gathered, per_task, glob):
        """Every worker's line (report.py) and TensorBoard's points for one sync step."""
        now = time.time()
        for task in self.tasks:
            if task not in gathered.rows:
                continue
            self.reporter.log(
                task, step, epoch, metrics=per_task[task], global_metrics=glob,
                step_time=gathered.figure(task, "step_time"),
                examples_per_sec=gathered.figure(task, "examples_per_sec", rows.mean),
                now=now, input_wait=gathered.figure(task, "input_wait"),
                first_batch=_first_hash([r["first_batch"] for r in gathered.rows[task]]))
        self._tensorboard(step, gathered, per_task, glob)

    def _tensorboard(self, step, gathered, per_task, glob):
        """``<metric>/<task>`` and ``<metric>/global`` (tb.points); validation in its own run."""
        times = {task: gathered.figure(task, "step_time") if task in gathered.rows else math.nan
                 for task in self.tasks}
        train, val = tb.points(self.tasks, self.layout.metrics, per_task, glob, times)
        self.tb.write(step, train)
        if self.tb_val and val:
            self.tb_val.write(step, val)

    def close(self) -> None:
        self.reporter.close()
        self.tb.close()
        if self.tb_val:
            self.tb_val.close()


def _first_hash(values: list) -> float | None:
    """The first replica's batch hash for the metrics line; None where none was taken."""
    taken = [v for v in values if v != step_probe.NO_FP]
    return taken[0] if taken else None
