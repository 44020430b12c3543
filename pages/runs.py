"""Runs: past and live runs, reattach one as the current run, what it ran, and two runs compared:
what differs (parameters, hosts, versions, code) above their loss curves."""
import pandas as pd
import streamlit as st

from console import runs_view
from console.ui import page, state, widgets
from console.figures import compare_figure


def main() -> None:
    ss = page.open_page("Runs")
    if ss is None:   # a session without the login token: the refusal is drawn, nothing else
        return
    store = state.run_store()
    if damaged := runs_view.damaged_note(store):
        st.warning(damaged)   # runs whose record is damaged: named here, left out of every list
    states = store.list()
    if not states:
        st.info(f"No run under {store.root} yet: start one on the Launch page.")
        return

    live_ids = [s.run_id for s in states if s.live]
    st.caption(f"{len(states)} run(s) under {store.root}; {len(live_ids)} live. "
               f"Current run: {ss.run_id or 'none'}.")
    st.dataframe(pd.DataFrame(runs_view.run_rows(states)), hide_index=True, width="stretch", key="runs_table")
    ids = [s.run_id for s in states]
    current = ss.run_id if ss.run_id in ids else ids[0]
    pick = st.selectbox("Run", ids, index=ids.index(current), key="runs_pick")

    def make_current() -> str | None:
        """The button's action (in its callback, ``widgets.action_button``): the run picked then."""
        pick = ss.runs_pick
        live = state.choose_run(pick)   # it stays current, even while a newer run is live
        if live is not None and live.run_id == pick:
            return (f"Run {pick} is now the current run ({live.run.state.phase}); "
                    "the Monitor and Checkpoints pages show it.")
        return None

    widgets.action_button("Make it the current run", "runs_select", make_current, disabled=pick == ss.run_id)

    st.subheader(f"What {pick} ran")
    lines, diff = runs_view.what_ran(store, pick)
    st.code("\n".join(lines), language=None)   # text from the record (paths, params): never Markdown
    if diff:
        with st.expander("Uncommitted changes (git diff)"):
            st.code(diff, language="diff")

    st.subheader("Compare two runs")
    if len(ids) < 2:
        st.info("Compare needs two runs.")
        return
    a_col, b_col = st.columns(2)
    a = a_col.selectbox("Run A", ids, index=0, key="compare_a")
    b = b_col.selectbox("Run B", ids, index=1, key="compare_b")
    rows = runs_view.differences(store, a, b)
    if rows:
        st.caption(f"{len(rows)} difference(s) between {a} (A) and {b} (B): parameters, hosts, versions, "
                   "code and packages; what is not listed is the same.")
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="compare_diff")
    else:
        st.info("Same parameters, hosts, versions and code.")
    smoothing = st.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="compare_smoothing")
    stores = {r: runs_view.load_metrics(store.path(r)) for r in {a, b}}
    series = [stores[r].global_loss() for r in (a, b)]
    empty = [r for r, (x, _) in zip((a, b), series) if not len(x)]
    if empty:
        st.warning(f"No metrics recorded locally for {', '.join(empty)}: open it on the Monitor page once "
                   "so the console copies its history.")
    st.plotly_chart(compare_figure(series[0], series[1], labels=(a, b), smoothing=smoothing),
                    key="compare_chart", width="stretch")


main()
