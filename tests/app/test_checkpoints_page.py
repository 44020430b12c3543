"""Checkpoints page: a finished run's checkpoints, Save now refused, Export verified (in the
background: the page returns at once and shows its progress), Restore held and confirmed."""
from __future__ import annotations

from tests.app.conftest import errors
from tests.conftest import wait_for

# An export starts TensorFlow twice at nice +10 (it yields to training): minutes on a busy machine.
EXPORT_TIMEOUT = 600


def test_table_and_save_now_on_a_finished_run(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    assert not at.exception
    assert not errors(at), errors(at)
    assert not at.info, [i.value for i in at.info]
    table = at.dataframe[0].value
    # 2 epochs of 30 steps, checkpoint_every 20: saves at 20 and 40, at each epoch end (30, 60).
    assert list(table["step"]) == [20, 30, 40, 60]
    assert {"step", "epoch", "loss", "time", "size (KB)", "held by"} <= set(table.columns)
    at.button(key="save_now").click().run()
    assert not at.exception
    assert any("not live" in m and "save" in m for m in errors(at)), errors(at)


def test_export_is_verified_and_downloadable(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    at.multiselect(key="export_formats").set_value(["keras"])
    at.button(key="export_button").click().run()
    assert not at.exception
    assert not errors(at), errors(at)
    working = [i.value for i in at.info if i.value.startswith(f"export {run_id}: working")]
    assert working, [i.value for i in at.info]                 # the page returned; progress shows
    assert at.button(key="restore_button").disabled            # one action at a time on a run
    wait_for(lambda: at.run() and any("verified" in s.value for s in at.success) and at, EXPORT_TIMEOUT,
             "the background export to report its verification")
    assert not errors(at), errors(at)
    assert not at.button(key="restore_button").disabled
    assert at.session_state["last_export"]["match"] is True
    assert at.session_state["last_export"]["sizes"]["keras"] > 0
    assert [b.proto.label for b in at.get("download_button") if b.proto.label.endswith(".keras")] \
        == ["Download model.keras"]


def test_restore_needs_confirmation_and_a_bad_name_is_an_error(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    at.text_input(key="export_name").input("../escape")
    at.button(key="export_button").click().run()
    assert not at.exception
    assert any("not valid" in m for m in errors(at)), errors(at)
    at.button(key="restore_button").click().run()            # nothing picked yet
    assert any("no checkpoint chosen" in m for m in errors(at)), errors(at)
    assert at.session_state["confirm_restore"] is None


def held(run_id: str) -> dict:
    """step -> purposes of the holds on it, read from the chief's folder (not from the page)."""
    from backend import checkpoints
    from backend.launcher import attach
    from backend.runs import RunStore
    return {c["step"]: c["held"] for c in checkpoints.list_checkpoints(attach(run_id, store=RunStore()))}


def test_restore_confirms_the_step_it_holds_and_cancel_releases_it(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    at.selectbox(key="restore_step").set_value(30).run()
    at.button(key="restore_button").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert at.session_state["confirm_restore"].step == 30
    assert any(f"Relaunch run {run_id} from step 30?" in w.value for w in at.warning)
    assert held(run_id)[30] == ["restore"]                       # pinned while the user decides
    at.run()                                                 # a refresh keeps the choice
    assert at.selectbox(key="restore_step").value == 30
    assert any("from step 30?" in w.value for w in at.warning)
    at.button(key="restore_no").click().run()
    assert not at.exception
    assert at.session_state["confirm_restore"] is None
    assert held(run_id)[30] == []


def test_a_chosen_step_that_left_the_list_is_said_not_swapped(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints", restore_step=25)           # chosen earlier, since rotated away
    assert at.selectbox(key="restore_step").value == 25
    assert any("step 25 has left the list" in w.value for w in at.warning), [w.value for w in at.warning]
    at.button(key="restore_button").click().run()
    assert any("step 25 is not complete" in m and "[20, 30, 40, 60]" in m for m in errors(at)), errors(at)
    assert at.session_state["confirm_restore"] is None
    assert not any("Relaunch run" in w.value for w in at.warning)


def test_step_options_keep_the_chosen_step():
    from console.actions import step_options
    assert step_options([20, 30, 40], 10) == [40, 30, 20, 10]
    assert step_options([20, 30, 40], 30) == [40, 30, 20]
    assert step_options([20, 30], None) == [30, 20]
