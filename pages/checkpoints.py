"""Checkpoints: the chief's checkpoints (live), Save now, Export with verification, Restore.

While the run trains, checkpoints rotate every few seconds. The table refreshes on its own; the
pickers do not: a widget redrawn every 2 s dropped the user's pick while its redraw was under way
(seen in a real browser under load), so the pickers take the newest list at each page run (any
click) and keep the step chosen (keyed by step, not position). A chosen step that left the list
is said, never swapped for another. Save, Export and Restore run in the background (the page
returns at once and shows their progress); an action holds its step on the chief until it ends.
"""
import pandas as pd
import streamlit as st

from console import access_view, actions
from console.ui import auth, page, state, widgets
from console.errors import ConsoleError
from console.markdown_safe import md_escape


def main() -> None:
    ss = page.open_page("Checkpoints")
    if ss is None:   # a session without the login token: the refusal is drawn, nothing else
        return
    live = state.current_run()
    if live is None:
        st.info("No run yet: start one on the Launch page.")
        return
    if live.run.state.live:
        live.ensure_monitor()
    widgets.run_header(live)
    action = state.current_action()
    busy = action is not None and not action.done and action.run_id == live.run_id
    widgets.action_panel(action, key="checkpoints")

    # Button actions (``widgets.action_button``): run in the click's callback, before the page is
    # drawn, so the page drawn next shows their progress; they read the other widgets' values from
    # the session, as they stood at the click.
    # Why this console's person may not take each action on this run (roles), or None.
    refused = access_view.refusals(live.run.store.root, ("save_now", "export", "restore"), live.run.state.owner)

    def submit(live, begin, *args) -> None:
        """Hand an action to the background; the page shows its progress."""
        ss.action_run_id = begin(live, state.registry(), *args).run_id

    def export(live) -> None:
        pick = ss.get("export_step")
        submit(live, actions.begin_export, None if pick in (None, "latest") else int(pick),
               tuple(ss.get("export_formats") or ()), ss.get("export_name") or "")

    def hold_picked(live) -> None:
        """The hold starts at the Restore press: the step cannot vanish while the operator confirms."""
        state.hold_for_restore(live, ss.get("restore_step"))

    def restore(live) -> None:
        submit(live, actions.begin_restore, state.take_pending_restore().hold)

    def keras_bytes(result: dict) -> bytes:
        """The export's model.keras, copied over SSH once per export and kept in the session (one
        export at a time): the page reruns every few seconds and on every click."""
        key = (live.run_id, result.get("name"), result.get("step"))
        kept = ss.get("keras_download")
        if kept is None or kept[0] != key:
            ss.keras_download = None   # the bytes of an older export go before the new ones come
            ss.keras_download = (key, actions.fetch_keras(live, result))
        return ss.keras_download[1]

    @auth.fragment(run_every=2)
    def listing() -> None:
        live.touch()   # on screen: the registry keeps it
        try:
            found = actions.list_checkpoints(live)
        except ConsoleError as err:
            st.error(md_escape(err))
            found = []
        ss.checkpoint_steps = [c["step"] for c in found]
        if found:
            st.caption(f"{len(found)} complete checkpoint(s) on the chief, at steps "
                       + ", ".join(str(c["step"]) for c in found) + ". The pickers below take this "
                       "list whenever the page redraws (any click).")
            st.dataframe(pd.DataFrame(actions.checkpoint_rows(found)), hide_index=True, width="stretch",
                         key="checkpoint_table")
        else:
            st.info("No complete checkpoint yet.")

    listing()
    steps = ss.get("checkpoint_steps") or []
    e1, r1 = st.columns(2)
    e1.selectbox("Export checkpoint", ["latest"] + actions.step_options(steps, ss.get("export_step")),
                 key="export_step", help="'latest' is resolved to a step when you press Export.")
    r1.selectbox("Resume from step", actions.step_options(steps, ss.get("restore_step")),
                 key="restore_step", index=None, placeholder="Pick a step")
    if isinstance(ss.get("restore_step"), int):
        r1.caption(f"Restore will use step {ss.restore_step}.")
    for key, what in (("export_step", "Export"), ("restore_step", "Restore")):
        chosen = ss.get(key)
        if isinstance(chosen, int) and chosen not in steps:
            st.warning(f"{what}: step {chosen} has left the list (retention keeps the last "
                       f"checkpoints); it may already be gone. Pick another step.")

    st.subheader("Save now")
    widgets.action_button("Save now", "save_now", submit, live, actions.begin_save,
                          disabled=busy or refused["save_now"] is not None, help=refused["save_now"])

    st.subheader("Export")
    e2, e3 = st.columns(2)
    e2.multiselect("Formats", ["savedmodel", "keras"], ["savedmodel", "keras"], key="export_formats")
    e3.text_input("Name (optional)", key="export_name")
    widgets.action_button("Export", "export_button", export, live, disabled=busy or refused["export"] is not None,
                          help=refused["export"])
    if action is not None and action.kind == "export" and action.done and not action.error:
        ss.last_export = action.result   # kept after the action's notice is gone
    result = ss.last_export
    if result and result.get("run_id") == live.run_id:
        st.json({k: result.get(k) for k in ("name", "step", "match", "paths", "sizes", "diffs")}, expanded=False)
        if "keras" in result.get("formats", []):
            try:
                data = keras_bytes(result)
                st.download_button("Download model.keras", data, f"{result['name']}.keras",
                                   "application/octet-stream", key="download_keras")
            except ConsoleError as err:
                st.error(md_escape(err))

    st.subheader("Restore")
    st.caption("Restore stops the run if it is live and relaunches every worker from the step picked above, "
               "as a new attempt of the same run. Newer checkpoints are moved aside (kept, not used).")
    widgets.action_button("Restore", "restore_button", hold_picked, live,
                          disabled=busy or refused["restore"] is not None, help=refused["restore"])
    pending = ss.confirm_restore
    if pending is not None and pending.run_id != live.run_id:
        state.release_pending_restore()   # held on another run, before the current run changed
        pending = None
    if pending is not None:
        st.warning(f"Relaunch run {live.run_id} from step {pending.step}? (Step {pending.step} is held until then.)")
        y, n = st.columns(2)
        widgets.action_button("Yes, restore", "restore_yes", restore, live, where=y, said_at="restore_button",
                              type="primary")
        widgets.action_button("Cancel", "restore_no", state.release_pending_restore, where=n,
                              said_at="restore_button")

    with st.expander("Checkpoints moved aside by restores"):
        try:
            aside = actions.list_abandoned(live)
        except ConsoleError as err:
            aside = []
            st.error(md_escape(err))
        if aside:
            st.dataframe(pd.DataFrame(actions.checkpoint_rows(aside)), hide_index=True, width="stretch")
        else:
            st.caption("None.")


main()
