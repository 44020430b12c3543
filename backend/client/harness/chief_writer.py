"""What the chief writes at a sync point, for every job kind: each worker's metric line
(``report.py``), then TensorBoard's scalars of what the lines kept (``tb.py``). The harness's
session and the client library's ``report`` (fit scripts through the Keras callback, custom
loops) both write through one ``ChiefWriter``.

Standard library only until the first scalar: ``tb.py`` loads TensorFlow, so it is imported
there, and only where TensorFlow is loaded already (a plain script's ``report`` stays standard
library only and writes no scalars). The validation run's writer is made when the first
validation value arrives.
"""
from __future__ import annotations

import math
import os
import sys
import time

from . import layout, metric_line, report
from .rows import VAL_PREFIX

FIGURES = ("step_time", "examples_per_sec", "input_wait", "first_batch")   # per task, any of them


class ChiefWriter:
    def __init__(self, run_dir: str, run_id: str, attempt: int) -> None:
        self.folder = os.path.join(run_dir, layout.TENSORBOARD)
        self.reporter = report.MetricsReporter(run_dir, run_id, attempt)
        self.tb: dict = {}   # "train", "val" -> tb.ScalarWriter, made at their first points

    def write(self, step: int, epoch: int, tasks, per_task: dict, glob: dict,
              figures: dict | None = None) -> dict:
        """One line per task in ``tasks`` (its named values ``per_task[task]``, the loss among
        them, and the global values ``glob``), with ``figures[task]`` (``FIGURES``), and the
        sync point's blocked time (``report.BLOCKED``) on every line; then the scalars. Returns
        task -> the line written."""
        now, blocked = time.time(), report.BLOCKED.take()
        figures = figures or {}
        written = {task: self.reporter.log(task, step, epoch, metrics=per_task[task], global_metrics=glob,
                                           now=now, blocked=blocked, **figures.get(task, {}))
                   for task in tasks}
        self._tensorboard(step, written, {t: figures.get(t, {}).get("step_time", math.nan) for t in written})
        return written

    def _tensorboard(self, step: int, written: dict, times: dict) -> None:
        """``<metric>/<task>`` and ``<metric>/global`` (tb.points) of the values the lines kept;
        validation values in their own run."""
        if not written or "tensorflow" not in sys.modules:
            return
        from . import tb
        tasks = list(written)
        per_task = {t: line.get(metric_line.MINE, {}) for t, line in written.items()}
        glob = written[tasks[-1]].get(metric_line.GLOBAL, {})
        names = [metric_line.LOSS, *sorted({n for m in per_task.values() for n in m
                                            if n != metric_line.LOSS and not n.startswith(VAL_PREFIX)})]
        train, val = tb.points(tasks, names, per_task, glob, times)
        if "train" not in self.tb:
            self.tb["train"] = tb.ScalarWriter(self.folder)
        self.tb["train"].write(step, train)
        if val:
            if "val" not in self.tb:
                self.tb["val"] = tb.ScalarWriter(os.path.join(self.folder, tb.VALIDATION))
            self.tb["val"].write(step, val)

    def close(self) -> None:
        self.reporter.close()
        for writer in self.tb.values():
            writer.close()
        self.tb.clear()

