"""Checkpoints page: a finished run's checkpoints, Save now refused, Export verified."""
from __future__ import annotations

from tests.app.conftest import errors


def test_table_and_save_now_on_a_finished_run(on_finished):
    open_page, run_id = on_finished
    at = open_page("checkpoints")
    assert not at.exception
    assert not errors(at), errors(at)
    assert not at.info, [i.value for i in at.info]
    table = at.dataframe[0].value
    # 2 epochs of 30 steps, checkpoint_every 20: saves at 20 and 40, at each epoch end (30, 60).
    assert list(table["step"]) == [20, 30, 40, 60]
    assert {"step", "epoch", "loss", "time", "size (KB)"} <= set(table.columns)
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
    assert any("verified" in s.value for s in at.success)
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
    at.button(key="restore_button").click().run()
    assert any("Relaunch run" in w.value for w in at.warning)
    at.button(key="restore_no").click().run()
    assert not at.exception
    assert at.session_state["confirm_restore"] is None
