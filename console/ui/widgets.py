"""Small Streamlit pieces that several pages share: run header, task states, stop with confirm."""
from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from backend.errors import ConsoleError
from console import live_run as live_mod
from console.ui import auth, state
from console.plain import md_escape


ACTION_SHOWN_S = 120.0   # how long a finished action stays on the page


def run_header(live) -> None:
    state = live.run.state
    restarts = max(0, state.attempt - 1)
    st.markdown(f"**Run `{live.run_id}`** — {state.phase}, attempt {state.attempt}"
                + (f" ({restarts} restart(s))" if restarts else ""))


def status_rows(statuses) -> list[dict]:
    return [{"task": s.name, "host": s.host, "state": s.label,
             "diagnosis": s.diagnosis or ""} for s in statuses]


def status_table(live, *, key: str) -> None:
    live.touch()   # drawn by timed panels too: the registry keeps a run that is on screen
    statuses = live.refresh()
    if live.status_error:
        st.warning(md_escape(live.status_error))   # host output: text, not Markdown
    if live.run.keeper_note:   # the run's keeper had died; settle started a new one
        st.warning(md_escape(live.run.keeper_note))
    if live.run.state.unreachable:
        st.warning(f"Not stopped yet on {', '.join(live.run.state.unreachable)}: the run stays "
                   f"{live.run.state.phase}. Press Stop again when those hosts answer.")
    if statuses:
        st.dataframe(pd.DataFrame(status_rows(statuses)), hide_index=True, width="stretch", key=key)
        for s in statuses:
            if s.diagnosis:
                st.error(md_escape(f"{s.name}: {s.diagnosis}"))   # log lines: text


def attempts_table(live) -> None:
    rows = [{"attempt": a.number, "started": time.strftime("%H:%M:%S", time.localtime(a.started)),
             "resumed from step": a.resume_step, "ended": a.reason or ("running" if a.ended is None else "")}
            for a in live.run.state.attempts]
    if len(rows) > 1:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def stop_controls(live, *, key: str) -> None:
    """A Stop button that asks before it stops; the stop then runs in the background.

    The buttons act in ``on_click`` callbacks, not in ``if st.button(...)``: Streamlit calls a
    callback as soon as the click reaches the server, whichever run comes next. Read as a return
    value, a click that lands while the page's live panels rerun on their timers could be taken
    by a panel-only run and lost (seen once in CI: the confirm stayed up and the run trained on).
    Callbacks run before the page's ``guard()``, so the one that stops checks the token itself.
    """
    ss = st.session_state
    flag, failed = f"{key}_confirm", f"{key}_stop_error"
    st.button("Stop run", key=f"{key}_stop", disabled=live is None, on_click=_ask_to_stop, args=(flag,))
    if ss.get(failed):
        st.error(md_escape(ss.pop(failed)))
    if live is not None and ss.get(flag):
        st.warning(f"Stop run {live.run_id}? Every task gets TERM, then KILL after 10 s.")
        yes, no = st.columns(2)
        yes.button("Yes, stop it", key=f"{key}_yes", type="primary", on_click=_stop, args=(live, flag, failed))
        no.button("Cancel", key=f"{key}_no", on_click=ss.__setitem__, args=(flag, False))


def _ask_to_stop(flag: str) -> None:
    st.session_state[flag] = True


def _stop(live, flag: str, failed: str) -> None:
    ss = st.session_state
    ss[flag] = False
    if not auth.holds_token():   # callbacks run before the page's guard(), which then refuses
        return
    try:
        live_mod.begin_stop(live, state.registry().actions)
        ss.action_run_id = live.run_id
    except ConsoleError as err:
        ss[failed] = str(err)


def action_panel(action, *, key: str) -> None:
    """Progress of an action running in the background; when it ends, redraw the page."""
    if action is None or (action.done and time.time() - action.ended > ACTION_SHOWN_S):
        return
    seen = f"{key}_seen_{action.kind}_{action.run_id}_{action.began}"

    @auth.fragment(run_every=1.0)
    def panel() -> None:
        if not action.done:
            st.info(action.line())
            return
        if action.error:
            st.error(md_escape(f"{action.kind.capitalize()} of run {action.run_id} failed: {action.error}"))
        else:
            st.success(action.summary or f"{action.kind.capitalize()} of run {action.run_id} done.")
        if not st.session_state.get(seen):
            st.session_state[seen] = True
            st.rerun()   # the whole page: the run's new phase, Start enabled again
    panel()
