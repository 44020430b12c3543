"""Runs page helpers: a table of runs and each run's loss read back from its local folder."""
from __future__ import annotations

import json
import time
from pathlib import Path

from backend.watch.metrics import MetricsStore
from backend.runs.store import RunState
from backend.watch.journal import METRICS, MIRROR_DIR


def run_rows(states: list[RunState]) -> list[dict]:
    rows = []
    for s in states:
        job = s.job.get("module") or " ".join(s.job.get("command", []))
        rows.append({"run": s.run_id, "phase": s.phase, "live": s.live, "attempt": s.attempt,
                     "tasks": len(s.tasks), "job": Path(job).name if job else "",
                     "created": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created))})
    return rows


def load_metrics(run_dir: Path) -> MetricsStore:
    """A fresh store from the monitor's local mirror of the run (no host is contacted)."""
    store = MetricsStore()
    path = Path(run_dir) / MIRROR_DIR / METRICS
    if not path.exists():
        return store
    records = []
    with open(path, "rb") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    store.add_many(records)
    return store
