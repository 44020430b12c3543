"""Small Streamlit pieces that several pages share: the action button, run header, task states,
stop with confirm."""
from __future__ import annotations

import time
from typing import Callable

import pandas as pd
import streamlit as st

from console import access_view, live_run as live_mod, monitor_view
from console.errors import ConsoleError, messages
from console.ui import auth, state
from console.markdown_safe import md_escape


ACTION_SHOWN_S = 120.0   # how long a finished action stays on the page
LEVELS = ("success", "info", "warning", "error")
CLICKS_KEY = "_action_clicks"   # action button key -> clicks acted on (widgets.action_button)


def action_button(label: str, key: str, act: Callable, *args, where=None, said_at: str | None = None,
                  spinner: str | None = None, **button) -> None:
    """A button that does ``act(*args)`` in its ``on_click`` callback; what it says shows below.

    Every action button goes through here. Streamlit calls a callback as soon as the click reaches
    the server, whichever script run comes next; read as ``if st.button(...)``, a click that
    lands while the page's live panels rerun on their timers could be taken by a panel-only run
    and lost (seen once in CI: Stop's confirm stayed up and the run trained on). So ``act`` runs
    before the page is drawn, reads what other widgets hold from ``st.session_state`` (their
    values at the click, not ``args`` bound at the last draw), and draws nothing itself: it
    returns what to say (a text, shown as a success, or ``(level, text)``, level one of
    ``LEVELS``), or raises ConsoleError, each of whose problems shows as an error, as text.
    ``where``: the column or container to draw in; ``said_at``: the key of the button whose place
    shows what this one says (a confirm's Yes, gone once answered, says it at the first button);
    ``button``: ``st.button``'s other arguments (type, disabled, help).

    One click acts once. On a busy machine a fragment's timed refresh can carry a click the
    browser has not sent yet, and the server runs ``on_click`` for every message carrying it
    (docs/facts.md #17): one "Save, then stop" ran the stop three times. So each drawing of the
    button carries the button's click count, and a delivery whose count has already acted is
    dropped; a new click reaches a button drawn after the last one acted, with the new count.
    (A delivery that comes after the button was drawn again, and enabled, looks like a new
    click: Stop's and Restore's confirms are gone by then; Start, Save now and Export are
    disabled while their action runs, and a second stop joins the first, ``Actions.submit``.)
    """
    clicks = st.session_state.setdefault(CLICKS_KEY, {})
    (where or st).button(label, key=key, on_click=_act,
                         args=(key, clicks.get(key, 0), said_at or key, act, args, spinner), **button)
    for level, text in st.session_state.pop(_said_key(key), []):
        getattr(where or st, level)(text)


def _said_key(key: str) -> str:
    return f"{key}__said"


def _act(key: str, drawn_at: int, said_at: str, act: Callable, args: tuple, spinner: str | None) -> None:
    if not auth.holds_token():   # callbacks run before the page's guard(), which then refuses
        return
    clicks = st.session_state.setdefault(CLICKS_KEY, {})
    if clicks.get(key, 0) != drawn_at:   # this click has acted: a repeated delivery of it
        return
    clicks[key] = drawn_at + 1
    try:
        if spinner:
            with st.spinner(spinner):
                said = act(*args)
        else:
            said = act(*args)
    except ConsoleError as err:
        said = [("error", md_escape(m)) for m in messages(err)]   # may quote hosts, logs, paths
    if isinstance(said, str):
        said = [("success", said)]
    elif isinstance(said, tuple):
        said = [said]
    st.session_state[_said_key(said_at)] = said or []


def run_header(live) -> None:
    state = live.run.state
    restarts = max(0, state.attempt - 1)
    st.markdown(f"**Run `{live.run_id}`** — {live.run.shown_phase(live.statuses)}, attempt {state.attempt}"
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
    rows = monitor_view.attempt_rows(live.run.state)
    if len(rows) > 1:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def goodput_bar(found) -> None:
    """Where the run's task-seconds went (docs/goodput.md): a bar, its line, each restart's cost."""
    from backend.records import goodput
    from console import figures
    if found is None or not found.reported:
        return
    st.plotly_chart(figures.goodput_figure(found), key="goodput_chart", config={"displayModeBar": False})
    st.caption(goodput.summary(found) + "".join(f". {c.text}" for c in found.attempts if c.text))


def stop_controls(live, *, key: str) -> None:
    """A Stop button that asks before it stops; the stop then runs in the background. Both act
    in their callbacks (``action_button``): a Stop click must never be lost."""
    ss = st.session_state
    flag = f"{key}_confirm"
    refused = access_view.refusal(live.run.store.root, "stop", live.run.state.owner) if live is not None else None
    if refused:   # a button its user may not use is not shown at all: the reason is
        st.caption(md_escape(f"No Stop for you here: {refused}"))
        return
    action_button("Stop run", f"{key}_stop", ss.__setitem__, flag, True, disabled=live is None)
    if live is not None and ss.get(flag):
        st.warning(f"Stop run {live.run_id}? **Save, then stop**: every worker first saves the step "
                   f"it is at (up to {live_mod.SAVE_GRACE_S:.0f} s), and Restore offers that step first. "
                   "**Yes, stop it**: every task gets TERM, then KILL after 10 s; what was trained "
                   "since the last checkpoint is lost.")
        save, yes, no = st.columns(3)
        action_button("Save, then stop", f"{key}_save", _stop, live, flag, True, where=save,
                      said_at=f"{key}_stop", type="primary")
        action_button("Yes, stop it", f"{key}_yes", _stop, live, flag, where=yes, said_at=f"{key}_stop")
        action_button("Cancel", f"{key}_no", ss.__setitem__, flag, False, where=no, said_at=f"{key}_stop")


def _stop(live, flag: str, save: bool = False) -> None:
    st.session_state[flag] = False
    live_mod.begin_stop(live, state.registry().actions, save=save)
    st.session_state.action_run_id = live.run_id


def action_panel(action, *, key: str, start_notice: bool = False) -> None:
    """Progress of an action running in the background; when it ends, redraw the page.
    ``start_notice``: this page says that a Start went well; its notice is Launch's alone, as
    it sends the user to the Monitor page, where the run is then on show already."""
    if action is None or (action.done and time.time() - action.ended > ACTION_SHOWN_S):
        return
    seen = f"{key}_seen_{action.kind}_{action.run_id}_{action.began}"
    recorded = f"{key}_recorded_{action.run_id}_{action.began}"

    @auth.fragment(run_every=1.0)
    def panel() -> None:
        if not action.done:
            st.info(action.line())
            if action.kind == "start" and not st.session_state.get(recorded) and state.recorded(action.run_id):
                st.session_state[recorded] = True
                st.rerun()   # the whole page once: the run shows (Monitor, the task table) as soon as it is recorded
            return
        if action.error:
            st.error(md_escape(f"{action.kind.capitalize()} of run {action.run_id} failed: {action.error}"))
        elif action.kind != "start" or start_notice:
            st.success(action.summary or f"{action.kind.capitalize()} of run {action.run_id} done.")
        if not st.session_state.get(seen):
            st.session_state[seen] = True
            st.rerun()   # the whole page: the run's new phase, Start enabled again
    panel()
