"""Sweep: a hyperparameter sweep's trials (state, parameters, objective, pruned at which step),
its best trial and run, every trial's objective over steps, and Optuna's figures.
The same numbers as `tfconsole sweep status SWEEP --json`."""
import pandas as pd
import streamlit as st

from console import access_view, sweep_view
from console.ui import page, state


def main() -> None:
    ss = page.open_page("Sweep")
    if ss is None:
        return
    root = state.run_store().root
    _start_form(root)
    found = sweep_view.sweeps(root)
    if not found:
        st.info("No sweep yet: start one above, or with `tfconsole sweep start SWEEP.yaml` (docs/sweeps.md).")
        return
    sweep_id = st.selectbox("Sweep", found, key="sweep_id")
    status, problem = sweep_view.status(root, sweep_id)
    if status is None:
        st.error(problem)
        return
    phase = status.get("phase", "")
    st.markdown(f"**{phase}**" + (f": {status['reason']}" if status.get("reason") else ""))
    st.caption(f"objective: {status['direction']} {status['metric']}, each trial's {status['of']} value; budget: {sweep_view.budget_text(status['budget'])}; "
               f"{status['at_once']} at once; sampler {status['sampler']}, pruner {status['pruner']}")
    st.text(sweep_view.best_line(status))   # text: parameters are shown as written
    if said := sweep_view.goodput_line(root, status):
        st.caption(said)
    _actions(root, sweep_id, status)
    rows = sweep_view.trial_rows(status)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="sweep_trials")
        st.plotly_chart(sweep_view.curves_figure(status), key="sweep_curves")
    figures, skipped = sweep_view.optuna_figures(root, sweep_id)
    for title, fig in figures.items():
        st.subheader(title)
        st.plotly_chart(fig, key=f"sweep_{title}")
    if skipped:
        st.caption("Not drawn yet: " + "; ".join(skipped))


def _start_form(root) -> None:
    """A sweep from its YAML (job, cluster, space, objective, budget), as a sweep file holds it."""
    refused = access_view.refusal(root, "launch")
    with st.expander("Start a sweep", expanded=False):
        with st.form("sweep_start_form"):
            text = st.text_area("Sweep (YAML, as a sweep file)", value=sweep_view.example_text(), height=320,
                                key="sweep_yaml")
            go = st.form_submit_button("Start sweep", disabled=bool(refused), help=refused)
        if go:
            sweep_id, problem = sweep_view.start(root, text, state.registry().options)
            if sweep_id:
                st.session_state["sweep_id"] = sweep_id
                st.success(f"Sweep {sweep_id} started: its trials appear below as they launch.")
            else:
                st.error(problem)


def _actions(root, sweep_id: str, status: dict) -> None:
    """Stop a live sweep; export the best trial's best checkpoint. Offered only to whoever may
    launch (a sweep launches runs) and export; the backend checks again at the action."""
    refused = access_view.refusals(root, ("launch", "export"))
    left, right = st.columns(2)
    if status.get("phase") in ("starting", "running", "stopping"):
        if refused["launch"]:
            left.caption(f"Stop: {refused['launch']}")
        elif left.button("Stop sweep", key="sweep_stop"):
            with st.spinner("Stopping the sweep's running trials"):
                said, ok = sweep_view.stop(root, sweep_id)
            (st.success if ok else st.error)(said)
    if status.get("best"):
        if right.button("Export the best", key="sweep_export", disabled=bool(refused["export"]),
                        help=refused["export"] or "Export the best trial's best checkpoint, verified as Export does"):
            with st.spinner("Exporting on the best trial's chief, then verifying in a fresh process"):
                said, ok = sweep_view.export_best(root, sweep_id, state.registry().options)
            (st.success if ok else st.error)(said)


main()
