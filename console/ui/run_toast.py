"""A toast on the open console when the session's current run ends, fails or restarts.

The webhook (``backend.alerts``) tells whoever is away; this tells whoever has the console open,
on any page: ``watch`` is a fragment in the sidebar that reads the current run's saved state (a
local file, no host) every few seconds and toasts a change it has seen happen. A run first seen
already ended toasts nothing: the news is old.
"""
from __future__ import annotations

import streamlit as st

from backend.errors import ConsoleError
from console.markdown_safe import md_escape
from console.ui import auth, state

SEEN = "toast_seen"      # run id -> (phase, attempt) as this session last saw it
EVERY_S = 3.0


def news(run_id: str, before: tuple[str, int] | None, phase: str, attempt: int,
         reason: str | None) -> tuple[str, str] | None:
    """(message, icon) for a change from ``before`` to (``phase``, ``attempt``), or None."""
    if before is None or before == (phase, attempt):
        return None
    was_live = before[0] in ("launching", "running", "queued", "restarting", "stopping")
    because = f": {reason}" if reason and reason not in ("finished", "stopped") else ""
    if was_live and phase == "finished":
        return f"Run {run_id} finished.", ":material/check_circle:"
    if was_live and phase == "failed":
        return f"Run {run_id} failed{because}", ":material/error:"
    if was_live and phase == "stopped":
        return f"Run {run_id} stopped.", ":material/stop_circle:"
    if attempt > before[1] and phase in ("launching", "running", "queued") and before[1] > 0:
        return f"Run {run_id} restarted: attempt {attempt}.", ":material/restart_alt:"
    return None


def check() -> None:
    """Toast what changed in the current run since this session last looked."""
    run_id = st.session_state.get("run_id")
    if not run_id:
        return
    try:
        saved = state.run_store().load(run_id)
    except ConsoleError:
        return   # gone or damaged: the pages say so
    seen = st.session_state.setdefault(SEEN, {})
    last = saved.attempts[-1] if saved.attempts else None
    found = news(run_id, seen.get(run_id), str(saved.phase), saved.attempt, last.reason if last else None)
    seen[run_id] = (str(saved.phase), saved.attempt)
    if found:
        st.toast(md_escape(found[0][:300]), icon=found[1])   # the reason is a task's text


@auth.fragment(run_every=EVERY_S)
def watch() -> None:
    check()
