"""Write RUN/metrics.jsonl: one JSON line per worker per sync point. Standard library only.

The line's fields and name rules are metric_line.py's; this is their only writer.

The harness uses it, and so can a bring-your-own training script (examples/byo_script.py): copy
this file next to the script or put the run's harness/ folder on sys.path. Only the chief writes;
each line is flushed at once because the watch agent tails the file live.
"""
from __future__ import annotations

import json
import math
import os
import time

from . import layout, metric_line


class MetricsReporter:
    """Append metrics lines for one attempt of one run."""

    def __init__(self, run_dir: str, run_id: str, attempt: int = 0):
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, layout.METRICS)
        self.run_id = run_id
        self.attempt = int(attempt)
        # Line buffered append: several attempts of one run share the file.
        self._fh = open(self.path, "a", buffering=1)

    def log(self, task: str, step: int, epoch: int, *, metrics: dict, global_metrics: dict,
            step_time: float = math.nan, examples_per_sec: float = math.nan,
            now: float | None = None, input_wait: float | None = None,
            first_batch: float | None = None) -> dict:
        """One worker's line. ``metrics``: this worker's named values (the loss is one of them,
        ``loss``); ``global_metrics``: the global values (metric_line.py says what both mean).
        Raises ValueError for a name or value metric_line refuses, before anything is written."""
        mine = metric_line.checked(metrics, what=f"metrics of {task}")
        glob = metric_line.checked(global_metrics, what="global metrics")
        line = {
            "run_id": self.run_id, "attempt": self.attempt, "task": task,
            "step": int(step), "epoch": int(epoch),
            "time": time.time() if now is None else float(now),
            "step_time": _finite(step_time), "examples_per_sec": _finite(examples_per_sec),
        }
        # The harness's own measurements (step_probe): the share of the window this worker
        # waited for its input, and at an attempt's first step a hash of its first batch.
        if input_wait is not None and math.isfinite(input_wait):
            line["input_wait"] = round(float(input_wait), 4)
        if first_batch is not None:
            line["first_batch"] = int(first_batch)
        if mine:
            line[metric_line.MINE] = mine
        if glob:
            line[metric_line.GLOBAL] = glob
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()
        return line

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _finite(value: float) -> float | None:
    """JSON has no NaN: an unknown figure (an attempt's first step has no step time) is null."""
    value = float(value)
    return value if math.isfinite(value) else None
