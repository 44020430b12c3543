"""Runs: every run with its job, parameters, duration and the last and best value of each metric
(sort by a column: the best run by val_accuracy is one click); reattach one as the current run,
what it ran, and runs compared: what differs (parameters, hosts, versions, code) above the curves
of any metric, over steps or over time."""
import pandas as pd
import streamlit as st

from console import runs_view
from console.markdown_safe import home_short, md_escape
from console.ui import page, state, widgets
from console.figures import compare_runs_figure


def main() -> None:
    ss = page.open_page("Runs")
    if ss is None:   # a session without the login token: the refusal is drawn, nothing else
        return
    store = state.run_store()
    if damaged := runs_view.damaged_note(store):
        st.warning(damaged)   # runs whose record is damaged: named here, left out of every list
    states = store.list()
    if not states:
        st.info(f"No run under {md_escape(home_short(store.root))} yet: start one on the Launch page.")
        return

    if st.toggle("Only runs I started", key="runs_mine"):
        states = runs_view.mine(states)
        if not states:
            st.info("You have started no run in this folder yet; switch off the filter to see everyone's.")
            return
    sweep = ""
    if sweeps := runs_view.sweep_ids(states):
        sweep = st.selectbox("Sweep", [""] + sweeps, key="runs_sweep", format_func=lambda v: v or "every run")
        states = runs_view.of_sweep(states, sweep) if sweep else states
    live_ids = [s.run_id for s in states if s.live]
    st.caption(f"{len(states)} run(s) under {md_escape(home_short(store.root))}; {len(live_ids)} live. "
               f"Current run: {ss.run_id or 'none'}.")
    st.dataframe(pd.DataFrame(runs_view.run_rows(states, store)), hide_index=True, width="stretch",
                 key="runs_table")   # metric names are column headers: shown as text
    st.caption("Metrics are each run's global values as this console copied them: while Monitor "
               "showed it, and from its chief when it ended; goodput % is the share of an ended "
               "run's task-seconds spent in training it kept. Click a column header to sort.")
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
    split = runs_view.goodput_split(store, [a, b])
    if split:
        st.caption(f"Where each run's task-seconds went, in % of its whole (docs/goodput.md): "
                   f"{a} (A) and {b} (B).")
        st.dataframe(pd.DataFrame(split), hide_index=True, width="stretch", key="compare_goodput")
    others = [r for r in ids if r not in (a, b)]
    # A sweep's trials: all on the charts, over its objective, at first (each sweep its own widgets,
    # so choosing another sweep starts from its defaults).
    of = f"_{sweep}" if sweep else ""
    more = st.multiselect("More runs on the charts", others, default=others[:runs_view.SWEEP_CURVES] if sweep else [],
                          key=f"compare_more{of}")
    runs = list(dict.fromkeys([a, b, *more]))
    m_col, x_col, s_col = st.columns([2, 1, 2])
    names = runs_view.metric_names(store, runs)
    first = runs_view.objective_of(store.root, sweep) if sweep else None
    metric = m_col.selectbox("Metric", names, index=names.index(first) if first in names else 0,
                             key=f"compare_metric{of}")
    x = x_col.radio("Over", ["step", "time"], horizontal=True, key="compare_x")
    smoothing = s_col.slider("Smoothing", 0.0, 0.99, 0.6, 0.01, key="compare_smoothing")
    series = runs_view.compare_series(store, runs, metric, x=x)
    empty = [r for r in runs if r not in series]
    if empty:
        st.warning(f"No {md_escape(metric)} recorded locally for {', '.join(empty)}: a live run's "
                   "metrics are copied while the Monitor page shows it, an ended run's when it ended "
                   "(if its chief's host answered then).")
    st.plotly_chart(compare_runs_figure(series, smoothing=smoothing, y_title=metric,
                                        x_title="step" if x == "step" else "seconds since start"),
                    key="compare_chart", width="stretch")

main()
