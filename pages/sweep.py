"""Sweep: a hyperparameter sweep's trials (state, parameters, objective, pruned at which step),
its best trial and run, every trial's objective over steps, and Optuna's figures (issue 50).
The same numbers as `tfconsole sweep status SWEEP --json`."""
import pandas as pd
import streamlit as st

from console import sweep_view
from console.ui import page, state


def main() -> None:
    ss = page.open_page("Sweep")
    if ss is None:
        return
    root = state.run_store().root
    found = sweep_view.sweeps(root)
    if not found:
        st.info("No sweep yet: start one with `tfconsole sweep start SWEEP.yaml` (README, \"Sweeps\").")
        return
    sweep_id = st.selectbox("Sweep", found, key="sweep_id")
    status, problem = sweep_view.status(root, sweep_id)
    if status is None:
        st.error(problem)
        return
    phase = status.get("phase", "")
    st.markdown(f"**{phase}**" + (f": {status['reason']}" if status.get("reason") else ""))
    st.caption(f"objective: {status['direction']} {status['metric']}; budget: {status['budget']}; "
               f"{status['at_once']} at once; sampler {status['sampler']}, pruner {status['pruner']}")
    st.text(sweep_view.best_line(status))   # text: parameters are shown as written
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


main()
