"""Cluster page: default cluster, bad rows shown in their own problem cell, edits, hostfile import."""
from __future__ import annotations

import json

import math

from console.forms import COLUMNS, PROBLEM
from tests.app.conftest import errors


def _row(**kw):
    row = {c: None for c in COLUMNS}
    row.update(role="worker", transport="ssh", python="python3", workdir="tfconsole")
    row.update(kw)
    return row


def _problems(at) -> list[str]:
    """The problem column of the cluster table, as the page drew it."""
    return list(at.data_editor[0].value[PROBLEM])


def _edit(at, **edits):
    """Seed the table editor with edits, as a browser would send them, and run the page."""
    at.session_state[f"cluster_editor_{at.session_state['cluster_version']}"] = {
        "edited_rows": {}, "added_rows": [], "deleted_rows": [], **edits}
    return at.run()


def test_default_cluster_shows_tf_config(page):
    at = page("cluster")
    assert not at.exception
    assert not errors(at)
    assert any("2 task(s)" in s.value for s in at.success)
    assert len(at.json) == 2                       # one TF_CONFIG per task
    assert list(at.data_editor[0].value.columns) == [PROBLEM, *COLUMNS]
    assert _problems(at) == ["", ""]               # fine rows leave their problem cell empty
    assert json.loads(at.json[0].value)["task"] == {"type": "worker", "index": 0}


def test_invalid_port_is_shown_next_to_its_row(page):
    rows = [_row(host="node1", tf_port=12345), _row(host="node2", tf_port=70000)]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    msgs = errors(at)
    assert any(m.startswith("Row 2:") and "tf_port" in m and "out of range" in m for m in msgs), msgs
    assert len(at.json) == 0                       # no TF_CONFIG for a broken cluster
    cells = _problems(at)
    assert cells[0] == ""
    assert cells[1].startswith("tf_port:") and "70000 is out of range" in cells[1], cells


def test_duplicate_host_port_is_an_error(page):
    rows = [_row(host="node1", tf_port=12345), _row(host="node1", tf_port=12345)]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    msgs = errors(at)
    assert any(m.startswith("Row 2:") and "both use node1:12345" in m for m in msgs), msgs
    assert any("Fix the errors" in i.value for i in at.info)
    cells = _problems(at)
    assert cells[0] == ""
    assert "worker-0 and worker-1 both use node1:12345" in cells[1], cells


def test_problem_cell_names_the_table_row_past_a_blank_row(page):
    blank = {c: None for c in COLUMNS}
    rows = [_row(host="node1", tf_port=12345), blank, _row(host="node2", tf_port=80)]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    assert any(m.startswith("Row 3:") and "out of range" in m for m in errors(at))
    cells = _problems(at)
    assert cells[:2] == ["", ""] and "80 is out of range" in cells[2], cells


def test_an_edit_shows_its_problem_in_the_row_and_keeps_the_value(page):
    at = page("cluster")
    at = _edit(at, edited_rows={1: {"tf_port": 70000}})
    assert not at.exception
    table = at.data_editor[0].value
    assert table["tf_port"][1] == 70000            # what the operator typed is still there
    assert "70000 is out of range" in table[PROBLEM][1] and table[PROBLEM][0] == ""
    assert any(m.startswith("Row 2:") and "out of range" in m for m in errors(at))
    current = at.session_state["cluster_current"]
    assert all(PROBLEM not in row for row in current)      # the problem column never reaches the spec
    assert current[1]["tf_port"] == 70000

    at = _edit(at, edited_rows={1: {"tf_port": 12399}})      # fixing it clears the cell
    assert not at.exception
    assert not errors(at)
    assert _problems(at) == ["", ""]
    assert at.data_editor[0].value["tf_port"][1] == 12399
    assert any("2 task(s)" in s.value for s in at.success)


def test_added_row_is_checked_and_the_problem_cell_is_not_part_of_the_spec(page):
    at = page("cluster")
    port = at.data_editor[0].value["tf_port"][0]
    at = _edit(at, edited_rows={0: {PROBLEM: "typed over"}},
               added_rows=[{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": port}])
    assert not at.exception
    cells = _problems(at)
    assert len(cells) == 3 and cells[0] == "" and "both" in cells[2], cells
    current = at.session_state["cluster_current"]
    assert len(current) == 3 and all(PROBLEM not in row for row in current)
    assert current[2]["tf_port"] == port and not math.isnan(current[2]["tf_port"])


def test_hostfile_import_replaces_the_table(page):
    at = page("cluster")
    at.text_area(key="hostfile_text").input("node1 slots=2\nnode2\n")
    at.button(key="hostfile_import").click().run()
    assert not at.exception
    rows = at.session_state["cluster_rows"]
    assert [(r["role"], r["host"], r["tf_port"]) for r in rows] == [
        ("chief", "node1", 12345), ("worker", "node1", 12346), ("worker", "node2", 12345)]
    assert any("3 task(s)" in s.value for s in at.success)


def test_bad_hostfile_line_is_an_error(page):
    at = page("cluster")
    at.text_area(key="hostfile_text").input("node1 slots=two\n")
    at.button(key="hostfile_import").click().run()
    assert not at.exception
    assert any("line 1" in m for m in errors(at))


def test_hostile_yaml_upload_is_an_error_not_an_exception(page):
    """Deep nesting raised RecursionError out of the page; nested anchors ran for minutes."""
    from tests.unit.test_yaml_bounds import laughs
    at = page("cluster")
    at.file_uploader(key="yaml_upload").set_value(("deep.yaml", b"tasks: " + b"[" * 20_000, "application/yaml"))
    at.run()
    at.button(key="yaml_load").click().run()
    assert not at.exception, at.exception
    assert any("deep.yaml is nested deeper than 50 levels" in m for m in errors(at)), errors(at)
    at.file_uploader(key="yaml_upload").set_value(("laughs.yaml", laughs().encode(), "application/yaml"))
    at.run()
    at.button(key="yaml_load").click().run()
    assert not at.exception, at.exception
    assert any("laughs.yaml expands to more than 100000 nodes" in m for m in errors(at)), errors(at)


def _spares(at):
    """The spare hosts' table as the page drew it."""
    return at.data_editor[1].value


def test_a_spare_row_is_checked_like_a_task_row_and_its_problem_names_the_field(page):
    """Issue 39: spare hosts have their own table, with a task's columns but no role, checked by
    the same rules; a bad cell is named in its row and in the page's errors."""
    at = page("cluster")
    assert list(_spares(at).columns) == [PROBLEM, *(c for c in COLUMNS if c != "role")]
    assert len(_spares(at)) == 0                               # no spare until one is listed
    at.session_state[f"spares_editor_{at.session_state['cluster_version']}"] = {
        "edited_rows": {}, "deleted_rows": [], "added_rows": [{"host": "spare1", "tf_port": 70000}]}
    at.run()
    assert not at.exception
    msgs = errors(at)
    assert any(m.startswith("Spare row 1:") and "spares[0].tf_port" in m and "70000 is out of range" in m
               for m in msgs), msgs
    assert _spares(at)[PROBLEM][0].startswith("tf_port:"), _spares(at)[PROBLEM][0]
    assert _problems(at) == ["", ""]                           # the task rows are fine
    assert len(at.json) == 0                                   # a broken cluster: no TF_CONFIG

    at.session_state[f"spares_editor_{at.session_state['cluster_version']}"] = {
        "edited_rows": {0: {"tf_port": 23999}}, "deleted_rows": [], "added_rows": []}
    at.run()
    assert not at.exception
    assert not errors(at)
    assert list(_spares(at)[PROBLEM]) == [""]
    assert any("2 task(s)" in s.value and "1 spare(s): spare1:23999" in s.value for s in at.success)
    assert len(at.json) == 2                                   # a spare gets no TF_CONFIG of its own
    # Its host key must be trusted before the keeper can move a task there: it is offered.
    assert at.selectbox(key="hostkey_target").options == ["spare1"]


def test_a_cluster_file_with_spares_and_min_workers_saved_and_loaded_keeps_them(page, tmp_path):
    at = page("cluster")
    at.session_state[f"spares_editor_{at.session_state['cluster_version']}"] = {
        "edited_rows": {}, "deleted_rows": [],
        "added_rows": [{"host": "spare1", "tf_port": 23999, "user": "ops", "workdir": "train", "gpus": "0,1"}]}
    at.run()
    at.number_input(key=f"min_workers_{at.session_state['cluster_version']}").set_value(1).run()
    assert not at.exception and not errors(at)
    saved = tmp_path / "cluster.yaml"
    at.text_input(key="save_path").input(str(saved)).run()
    at.button(key="save_yaml").click().run()
    assert not at.exception
    assert any(f"Saved {saved}" in s.value for s in at.success)
    import yaml
    data = yaml.safe_load(saved.read_text())
    assert data["spares"] == [{"host": "spare1", "tf_port": 23999, "user": "ops", "workdir": "train",
                               "gpus": [0, 1]}]
    assert data["min_workers"] == 1 and len(data["tasks"]) == 2

    fresh = page("cluster")                                   # another session loads the file back
    fresh.file_uploader(key="yaml_upload").set_value(("cluster.yaml", saved.read_bytes(), "application/yaml"))
    fresh.run()
    fresh.button(key="yaml_load").click().run()
    assert not fresh.exception and not errors(fresh)
    spare = _spares(fresh).iloc[0]
    assert (spare["host"], spare["tf_port"], spare["user"], spare["workdir"], spare["gpus"]) == (
        "spare1", 23999, "ops", "train", "0,1")
    assert fresh.number_input(key=f"min_workers_{fresh.session_state['cluster_version']}").value == 1
    # What Start launches on (state.cluster_choice: the rows as last edited) keeps them too.
    from console.forms import check_rows
    cluster, _ = check_rows(fresh.session_state["cluster_current"])
    assert [t.host for t in cluster.spares] == ["spare1"] and cluster.min_workers == 1


def test_preflight_checks_the_spares_too_and_a_bad_spare_is_a_warning_not_a_failure(page):
    """A spare the keeper could not use is found before the run needs it: the preflight checks
    it with the tasks, names it as the spare table numbers it, and still lets the run start."""
    import sys
    at = page("cluster")
    at.session_state[f"spares_editor_{at.session_state['cluster_version']}"] = {
        "edited_rows": {}, "deleted_rows": [], "added_rows": [
            {"host": "127.0.0.9", "transport": "local", "tf_port": 23998, "python": sys.executable},
            {"host": "127.0.0.10", "transport": "local", "tf_port": 23998, "python": "/no/such/python"}]}
    at.run()
    assert not at.exception and not errors(at), errors(at)
    at.button(key="preflight_button").click().run()
    assert not at.exception
    assert not errors(at), errors(at)                          # the tasks passed: Start may go on
    table = at.dataframe[-1].value                             # the preflight table
    assert list(table["task"])[-2:] == ["spare 1", "spare 2"]
    assert list(table["host"])[-2:] == ["127.0.0.9", "127.0.0.10"]
    assert str(table["python"].iloc[-2]).startswith("ok") and str(table["python"].iloc[-1]).startswith("FAIL")
    warned = [w.value.replace("\\", "") for w in at.warning]
    assert any(w.startswith("spare 2 (127.0.0.10): ") and "/no/such/python" in w
               and w.endswith("the keeper would skip this spare") for w in warned), warned
    assert not any(w.startswith("spare 1") for w in warned)
    assert any("Every task's host passed the preflight." in s.value for s in at.success)


def test_a_min_workers_of_0_from_a_file_is_shown_with_its_warning_not_an_exception(page):
    from console.forms import cluster_rows
    rows = cluster_rows({"tasks": [{"role": "worker", "host": "n1", "tf_port": 23990},
                                   {"role": "worker", "host": "n2", "tf_port": 23990}], "min_workers": 0})
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    assert at.number_input(key=f"min_workers_{at.session_state['cluster_version']}").value == 0
    assert any("min_workers 0 leaves no room to shrink" in w.value for w in at.warning), [w.value for w in at.warning]
