"""Checkpoints: the chief's checkpoints (live), Save now, Export with verification, Restore."""
import pandas as pd
import streamlit as st

from console import actions, state, widgets
from console.errors import ConsoleError

state.init()
ss = st.session_state
st.title("Checkpoints")
live = state.current_run()
if live is None:
    st.info("No run yet: start one on the Launch page.")
    st.stop()
if live.run.state.live:
    live.ensure_monitor()
widgets.run_header(live)


@st.fragment(run_every=2)
def table() -> None:
    try:
        found = actions.list_checkpoints(live)
    except ConsoleError as err:
        st.error(str(err))
        found = []
    ss.checkpoint_steps = [c["step"] for c in found]
    if found:
        st.caption(f"{len(found)} complete checkpoint(s) on the chief, at steps "
                   + ", ".join(str(step) for step in sorted(ss.checkpoint_steps)) + ".")
        st.dataframe(pd.DataFrame(actions.checkpoint_rows(found)), hide_index=True, width="stretch",
                     key="checkpoint_table")
    else:
        st.info("No complete checkpoint yet.")


table()
steps = sorted(ss.get("checkpoint_steps") or [], reverse=True)

st.subheader("Save now")
if st.button("Save now", key="save_now"):
    try:
        with st.status("Asking every worker to save at the next sync point...", expanded=False) as box:
            step = actions.save_now(live)
            box.update(label=f"Saved at step {step}", state="complete")
        st.success(f"Checkpoint saved at step {step}.")
    except ConsoleError as err:
        st.error(str(err))

st.subheader("Export")
e1, e2, e3 = st.columns([2, 2, 2])
pick = e1.selectbox("Checkpoint", ["latest"] + steps, key="export_step")
formats = e2.multiselect("Formats", ["savedmodel", "keras"], ["savedmodel", "keras"], key="export_formats")
name = e3.text_input("Name (optional)", key="export_name")
if st.button("Export", key="export_button"):
    try:
        with st.status("Exporting on the chief, then verifying in a fresh process...") as box:
            result = actions.export(live, None if pick == "latest" else int(pick), tuple(formats), name)
            box.update(label=f"Exported {result.get('name')}", state="complete")
        ss.last_export = {"run_id": live.run_id, **result}
    except ConsoleError as err:
        st.error(str(err))
result = ss.last_export
if result and result.get("run_id") == live.run_id:
    if result.get("match"):
        st.success(f"Export {result['name']} (step {result['step']}) verified: reloaded models match the "
                   f"checkpoint, max abs diff {result['max_abs_diff']:.2e} (tolerance {result['tolerance']:g}).")
    st.json({k: result.get(k) for k in ("name", "step", "paths", "sizes", "diffs")}, expanded=False)
    if "keras" in result.get("formats", []):
        try:
            data = actions.fetch_keras(live, result)
            st.download_button("Download model.keras", data, f"{result['name']}.keras",
                               "application/octet-stream", key="download_keras")
        except ConsoleError as err:
            st.error(str(err))

st.subheader("Restore")
r1, r2 = st.columns([2, 3])
restore_step = r1.selectbox("Resume from step", steps, key="restore_step")
r2.caption("Restore stops the run if it is live and relaunches every worker from this checkpoint, "
           "as a new attempt of the same run.")
if st.button("Restore", key="restore_button", disabled=not steps):
    ss.confirm_restore = restore_step
if ss.confirm_restore is not None:
    st.warning(f"Relaunch run {live.run_id} from step {ss.confirm_restore}?")
    y, n = st.columns(2)
    if y.button("Yes, restore", key="restore_yes", type="primary"):
        step, ss.confirm_restore = ss.confirm_restore, None
        try:
            with st.status(f"Restoring from step {step}...") as box:
                actions.restore(live, step)
                box.update(label=f"Relaunched from step {step}", state="complete")
            st.success(f"Run {live.run_id} resumed from step {step} (attempt {live.run.state.attempt}).")
        except ConsoleError as err:
            st.error(str(err))
    if n.button("Cancel", key="restore_no"):
        ss.confirm_restore = None
        st.rerun()
