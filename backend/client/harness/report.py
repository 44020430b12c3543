"""Write RUN/metrics.jsonl: one JSON line per worker per sync point. Standard library only.

The line's fields and name rules are metric_line.py's; this is their only writer.

The harness uses it, and so can a bring-your-own training script (examples/byo_script.py): put
the run's ``RUN/lib`` on sys.path and import ``tfconsole.harness.report``. Only the chief writes;
each line is flushed at once because the watch agent tails the file live.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

from . import layout, metric_line


class Blocked:
    """Seconds the chief's training stood still since its last sync point's lines, by kind
    (``metric_line.BLOCKED_KINDS``): whoever saves or validates adds, the writer of a sync
    point's lines takes (and so resets) them once for all of that point's lines."""

    def __init__(self) -> None:
        self.seconds: dict = {}

    def add(self, kind: str, seconds: float) -> None:
        if kind in metric_line.BLOCKED_KINDS and seconds > 0:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + float(seconds)

    def take(self) -> dict:
        out, self.seconds = {k: round(v, 4) for k, v in self.seconds.items()}, {}
        return out


BLOCKED = Blocked()   # one per process: the chief's saves and validations, whatever the job kind


class MetricsReporter:
    """Append metrics lines for one attempt of one run."""

    def __init__(self, run_dir: str, run_id: str, attempt: int = 0):
        os.makedirs(run_dir, exist_ok=True)
        self.path = os.path.join(run_dir, layout.METRICS)
        self.run_id = run_id
        self.attempt = int(attempt)
        # Line buffered append: several attempts of one run share the file.
        self._fh = open(self.path, "a", buffering=1)
        # What was left out is said once, not on every line: a script reports the same names
        # at every step. Both stop at MAX_NAMES names, for a script that invents one per line.
        self._listed: dict[str, set] = {}   # task -> the names its lines listed as left out
        self._told: set = set()             # the names the log has said were left out

    def log(self, task: str, step: int, epoch: int, *, metrics: dict, global_metrics: dict,
            step_time: float = math.nan, examples_per_sec: float = math.nan,
            now: float | None = None, input_wait: float | None = None,
            first_batch: float | None = None, blocked: dict | None = None) -> dict:
        """One worker's line. ``metrics``: this worker's named values (the loss is one of them,
        ``loss``); ``global_metrics``: the global values (metric_line.py says what both mean).
        Never raises for what they hold: what ``metric_line.kept`` leaves out is said once on
        stderr (the task's log) and listed in the line's ``left_out``, and the line is written."""
        mine, left = metric_line.kept(metrics)
        glob, left_global = metric_line.kept(global_metrics)
        left += left_global
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
        if blocked:   # the same window for every worker's line of this sync point
            line[metric_line.BLOCKED] = dict(blocked)
        if mine:
            line[metric_line.MINE] = mine
        if glob:
            line[metric_line.GLOBAL] = glob
        if left:
            self._tell(task, left)
            listed = self._list(task, left)
            if listed:
                line[metric_line.LEFT_OUT] = listed
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()
        return line

    def _list(self, task: str, left: list) -> list[str]:
        """The names of ``left`` that no line of ``task`` has listed yet."""
        seen = self._listed.setdefault(task, set())
        room = max(0, metric_line.MAX_NAMES - len(seen))
        new = list(dict.fromkeys(name for name, _ in left if name not in seen))[:room]
        seen.update(new)
        return new

    def _tell(self, task: str, left: list) -> None:
        """One line on stderr for the names the log has not named yet: which, why, what to do."""
        room = max(0, metric_line.MAX_NAMES - len(self._told))
        first: dict[str, str] = {}
        for name, why in left:
            if name not in self._told:
                first.setdefault(name, why)
        new = list(first.items())[:room]
        if not new:
            return
        self._told.update(n for n, _ in new)
        by_why: dict[str, list[str]] = {}
        for name, why in new:
            by_why.setdefault(why, []).append(name)
        said = "; ".join(f"{', '.join(names)} ({why})" for why, names in by_why.items())
        print(f"tfconsole: metrics of {task}: left out {said}; training goes on. A line keeps the "
              f"first {metric_line.MAX_NAMES} names that are numbers, the loss first, then in the "
              "order the script gives them: to choose, report fewer metrics (pass only the ones "
              "to watch)", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _finite(value: float) -> float | None:
    """JSON has no NaN: an unknown figure (an attempt's first step has no step time), or one that
    is not a number, is null."""
    value = metric_line.as_number(value)
    return value if value is not None and math.isfinite(value) else None
