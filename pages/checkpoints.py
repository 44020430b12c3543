"""Checkpoints: the chief's checkpoints (live), Save now, Export with verification, Restore.

While the run trains, checkpoints rotate every few seconds: the pickers refresh with the list
but keep the step the user chose (keyed by step, not position); a chosen step that left the list
is said, never swapped for another. An action holds its step on the chief until it ends.
"""
import pandas as pd
import streamlit as st

from console import actions, auth, state, widgets
from console.errors import ConsoleError

auth.guard()   # nothing on this page for a session without the login token
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
def listing() -> None:
    try:
        found = actions.list_checkpoints(live)
    except ConsoleError as err:
        st.error(str(err))
        found = []
    ss.checkpoint_steps = [c["step"] for c in found]
    if found:
        st.caption(f"{len(found)} complete checkpoint(s) on the chief, at steps "
                   + ", ".join(str(c["step"]) for c in found) + ".")
        st.dataframe(pd.DataFrame(actions.checkpoint_rows(found)), hide_index=True, width="stretch",
                     key="checkpoint_table")
    else:
        st.info("No complete checkpoint yet.")


# Its own fragment, with no remote call in it: a choice made while a slow fragment run is under
# way was dropped (seen in a real browser), so the pickers redraw quickly from the last listing.
@st.fragment(run_every=2)
def pickers() -> None:
    steps = ss.get("checkpoint_steps") or []
    e1, r1 = st.columns(2)
    e1.selectbox("Export checkpoint", ["latest"] + actions.step_options(steps, ss.get("export_step")),
                 key="export_step", help="'latest' is resolved to a step when you press Export.")
    r1.selectbox("Resume from step", actions.step_options(steps, ss.get("restore_step")),
                 key="restore_step", index=None, placeholder="Pick a step")
    chosen = ss.get("restore_step")
    if isinstance(chosen, int):
        r1.caption(f"Restore will use step {chosen}.")
    for key, what in (("export_step", "Export"), ("restore_step", "Restore")):
        chosen = ss.get(key)
        if isinstance(chosen, int) and chosen not in steps:
            st.warning(f"{what}: step {chosen} has left the list (retention keeps the last "
                       f"checkpoints); it may already be gone. Pick another step.")


listing()
pickers()

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
e2, e3 = st.columns(2)
formats = e2.multiselect("Formats", ["savedmodel", "keras"], ["savedmodel", "keras"], key="export_formats")
name = e3.text_input("Name (optional)", key="export_name")
if st.button("Export", key="export_button"):
    pick = ss.get("export_step")
    try:
        with st.status("Holding the checkpoint on the chief...") as box:
            result = actions.export(live, None if pick in (None, "latest") else int(pick), tuple(formats), name,
                                    on_step=lambda s: box.update(
                                        label=f"Exporting step {s} on the chief, then verifying it in a "
                                              f"fresh process..."))
            box.update(label=f"Exported {result.get('name')} (step {result.get('step')})", state="complete")
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
st.caption("Restore stops the run if it is live and relaunches every worker from the step picked above, "
           "as a new attempt of the same run. Newer checkpoints are moved aside (kept, not used).")
if st.button("Restore", key="restore_button"):
    try:   # the hold starts here: the step cannot vanish while you confirm
        ss.confirm_restore = actions.hold_for_restore(live, ss.get("restore_step"))
    except ConsoleError as err:
        st.error(str(err))
hold = ss.confirm_restore
if hold is not None:
    st.warning(f"Relaunch run {live.run_id} from step {hold.step}? (Step {hold.step} is held until then.)")
    y, n = st.columns(2)
    if y.button("Yes, restore", key="restore_yes", type="primary"):
        ss.confirm_restore = None
        try:
            with st.status(f"Restoring from step {hold.step}...") as box:
                outcome = actions.restore(live, hold)
                box.update(label=f"Relaunched from step {hold.step}", state="complete")
            st.success(f"Run {live.run_id} restored from step {outcome.step}: {outcome.summary}.")
            if outcome.moved_aside:
                st.info("Moved aside (kept, never picked by 'latest' or a restart): "
                        + "; ".join(f"{t}: steps {s}" for t, s in sorted(outcome.moved_aside.items())))
        except ConsoleError as err:
            st.error(str(err))
    if n.button("Cancel", key="restore_no"):
        ss.confirm_restore = None
        try:
            actions.release_hold(live, hold)
        except ConsoleError:
            pass   # the hold expires by itself
        st.rerun()

with st.expander("Checkpoints moved aside by restores"):
    try:
        aside = actions.list_abandoned(live)
    except ConsoleError as err:
        aside = []
        st.error(str(err))
    if aside:
        st.dataframe(pd.DataFrame(actions.checkpoint_rows(aside)), hide_index=True, width="stretch")
    else:
        st.caption("None.")
