"""A run's status as one JSON object: what ``tfconsole status RUN --json`` prints and what the
Python API's ``RunHandle.status()`` returns (one view for both)."""
from __future__ import annotations

from dataclasses import asdict

from backend.runs.membership import shrink_shown
from backend.runs.resume import warnings as resume_warnings


def status_json(run, statuses, *, health_line: str) -> dict:
    s = run.state
    # phase: the record's (queued while Slurm holds every task); queue: Slurm's reason and place.
    queue = statuses[0].queue if s.phase == "queued" and statuses and statuses[0].queue else None
    return {"run_id": s.run_id, "phase": str(s.phase), "queue": queue, "attempt": s.attempt,
            "tasks": [{"name": t.name, "host": t.host, "state": str(t.state), "label": t.label,
                       "exit_code": t.exit_code, "diagnosis": t.diagnosis} for t in statuses],
            "attempts": [asdict(t) for t in s.attempts], "unreachable": list(s.unreachable),
            "keeper": run.keeper_note or None, "health": health_line or None,
            "resume": resume_warnings(s) or None, "shrink": shrink_shown(run.job)}
