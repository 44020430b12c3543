"""Runs page: lists runs, makes one current, compares two; empty folder says what to do."""
from __future__ import annotations

from console import runs_view


def test_empty_runs_folder(page):
    at = page("runs")
    assert not at.exception
    assert any("No run" in i.value for i in at.info)


def test_list_and_make_current(on_finished):
    open_page, run_id = on_finished
    at = open_page("runs", run_id="someone-else")
    assert not at.exception
    table = at.dataframe[0].value
    assert run_id in list(table["run"])
    assert table.loc[table["run"] == run_id, "phase"].item() == "finished"
    at.button(key="runs_select").click().run()
    assert not at.exception
    assert at.session_state["run_id"] == run_id
    assert any("now the current run" in s.value for s in at.success)


def test_metrics_read_back_from_the_local_mirror(tmp_path):
    mirror = tmp_path / "watch_mirror"
    mirror.mkdir()
    lines = [f'{{"task":"worker-{w}","step":{s},"attempt":1,"loss":{1.0 / s},"global_loss":{1.0 / s}}}'
             for s in (1, 2, 3) for w in (0, 1)]
    (mirror / "metrics.jsonl").write_text("\n".join(lines) + "\nnot json\n")
    store = runs_view.load_metrics(tmp_path)
    assert store.tasks() == ["worker-0", "worker-1"]
    assert list(store.global_loss()[0]) == [1, 2, 3]
