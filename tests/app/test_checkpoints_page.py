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
    from backend.runs.launcher import attach
    from backend.runs.store import RunStore
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


def _release_all(run_id: str) -> None:
    """Leave no hold behind for the other tests on the shared finished run, even on failure."""
    import os
    from backend import checkpoints
    from backend.runs.launcher import attach
    from backend.runs.store import RunStore
    run = attach(run_id, store=RunStore())
    directory = checkpoints.checkpoint_dir(run, run.state.chief.name)
    local = os.path.join(os.path.expanduser("~"), directory)   # a local run: relative to HOME
    for name in os.listdir(os.path.join(local, "holds")):   # retention.HOLDS: <id>.json each
        if name.endswith(".json"):
            checkpoints.release(run, checkpoints.Hold(run.state.chief.name, 0, name[:-5], "restore"))


def test_a_second_restore_press_releases_the_first_hold(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    try:
        at.selectbox(key="restore_step").set_value(20).run()
        at.button(key="restore_button").click().run()
        assert held(run_id)[20] == ["restore"]
        at.selectbox(key="restore_step").set_value(40).run()
        at.button(key="restore_button").click().run()
        assert not at.exception and not errors(at), errors(at)
        assert any(f"Relaunch run {run_id} from step 40?" in w.value for w in at.warning)
        assert held(run_id)[20] == [] and held(run_id)[40] == ["restore"]   # the first press's hold is gone
        at.button(key="restore_no").click().run()
        assert held(run_id)[40] == []
    finally:
        _release_all(run_id)


def test_an_expired_restore_hold_says_to_pick_again(on_finished, monkeypatch):
    """Yes after the hold expired: our error with the next step, not a KeyError in the panel."""
    import dataclasses
    from backend.checkpoints import CHOICE_TTL_S
    from console import actions
    submitted = []
    monkeypatch.setattr(actions, "begin_restore", lambda *a: submitted.append(a))   # never relaunch
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    try:
        at.selectbox(key="restore_step").set_value(20).run()
        at.button(key="restore_button").click().run()
        pending = at.session_state["confirm_restore"]
        at.session_state["confirm_restore"] = dataclasses.replace(pending, at=pending.at - CHOICE_TTL_S)
        at.button(key="restore_yes").click().run()
        assert not at.exception
        assert any("hold on step 20 expired" in m and "Pick the checkpoint again" in m for m in errors(at)), errors(at)
        assert submitted == []
        assert at.session_state["confirm_restore"] is None
        assert held(run_id)[20] == []
    finally:
        _release_all(run_id)


def test_leaving_the_page_releases_an_unanswered_restore_hold(on_finished):
    from streamlit.testing.v1 import AppTest
    from tests.app.conftest import as_owner
    from tests.conftest import ROOT
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    try:
        at.selectbox(key="restore_step").set_value(20).run()
        at.button(key="restore_button").click().run()
        assert held(run_id)[20] == ["restore"]
        app = as_owner(AppTest.from_file(str(ROOT / "console" / "app.py"), default_timeout=60))
        app.session_state["confirm_restore"] = at.session_state["confirm_restore"]
        app.run()                                              # the Launch page: the operator left
        assert not app.exception
        assert held(run_id)[20] == []
        assert app.session_state["confirm_restore"] is None
    finally:
        _release_all(run_id)


def test_model_keras_is_fetched_once_per_export(on_finished, monkeypatch):
    from console import actions
    fetched = []
    monkeypatch.setattr(actions, "fetch_keras", lambda live, result: fetched.append(result["name"]) or b"model")
    open_page, run_id = on_finished
    export = {"run_id": run_id, "name": "e1", "step": 30, "formats": ["keras"], "match": True}
    at = open_page("checkpoints", last_export=export)
    at.run()
    at.run()                                                    # reruns: a click, the timer
    assert not at.exception and not errors(at), errors(at)
    assert [b.proto.label for b in at.get("download_button")] == ["Download model.keras"]
    assert fetched == ["e1"]
    at.session_state["last_export"] = {**export, "name": "e2"}    # a new export is fetched anew
    at.run()
    assert fetched == ["e1", "e2"]
