"""The Audit page's rows: who did what to which run, newest first, filtered."""
from __future__ import annotations

import time
from pathlib import Path

from backend.access import audit


def audit_rows(runs_root: Path, *, run: str | None = None, user: str | None = None,
               action: str | None = None) -> tuple[list[dict], list[str]]:
    """Rows for a table (text only: a name from a provider is shown as it is, never as Markdown)
    and the lines skipped as damaged."""
    entries, skipped = audit.read(runs_root)
    rows = [{"when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["time"])), "who": e["who"].name,
             "via": f"{e['who'].via} on {e['who'].host}", "action": e["action"], "run": e.get("run") or "",
             "outcome": e.get("outcome") or "",
             "arguments": ", ".join(f"{k}={v}" for k, v in (e.get("args") or {}).items())}
            for e in reversed(audit.matching(entries, run=run or None, user=user or None, action=action or None))]
    return rows, skipped


def choices(runs_root: Path) -> dict[str, list[str]]:
    """The runs, people and actions the audit names, for the filters."""
    entries, _ = audit.read(runs_root)
    return {"run": sorted({e["run"] for e in entries if e.get("run")}),
            "user": sorted({e["who"].name for e in entries}),
            "action": sorted({e["action"] for e in entries})}
