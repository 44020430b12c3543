"""Runs page helpers: a table of runs, what each ran (``backend.runs.record``), what two runs
differ in, and each run's loss read back from its local folder."""
from __future__ import annotations

import json
import time
from pathlib import Path

from backend.watch.metrics import MetricsStore
from backend.runs import record
from backend.runs.store import RunState, RunStore
from backend.watch.journal import METRICS, MIRROR_DIR
from console.plain import md_escape


def damaged_note(store: RunStore) -> str | None:
    """The runs the page cannot show (a damaged state file: every list skips them), each named
    with why, as Markdown for ``st.warning``; None when there are none. Escaped: the reasons
    quote a path and the file's own values."""
    damaged = [found for found in store.list_all() if not isinstance(found, RunState)]
    if not damaged:
        return None
    lines = "\n".join(f"- {md_escape(err.problem)}" for err in damaged)
    return (f"{len(damaged)} run(s) under {md_escape(store.root)} cannot be shown: their state file is "
            f"damaged, and they are left out below.\n\n{lines}\n\n"
            "Inspect each file by hand; the runs' logs are still in their folders.")


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


def what_ran(store: RunStore, run_id: str) -> tuple[list[str], str]:
    """The picked run's record as lines, and its uncommitted diff ("" when none): from the local
    folder only (the hosts' versions are those kept when an attempt ended)."""
    shown = record.view(store.load(run_id), store.path(run_id))
    return record.summary(shown), (shown["code"].get("git") or {}).get("diff", "")


def differences(store: RunStore, a: str, b: str) -> list[dict]:
    """What differs between runs ``a`` and ``b``: one row per parameter, host field, version,
    code identity or package, with the value in each."""
    return record.differences(record.view(store.load(a), store.path(a)),
                              record.view(store.load(b), store.path(b)))
