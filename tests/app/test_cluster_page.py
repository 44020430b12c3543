"""Cluster page: default cluster, bad rows shown per row, hostfile import."""
from __future__ import annotations

import json

from console.forms import COLUMNS
from tests.app.conftest import errors


def _row(**kw):
    row = {c: None for c in COLUMNS}
    row.update(role="worker", transport="ssh", python="python3", workdir="tfconsole")
    row.update(kw)
    return row


def test_default_cluster_shows_tf_config(page):
    at = page("cluster")
    assert not at.exception
    assert not errors(at)
    assert any("2 task(s)" in s.value for s in at.success)
    assert len(at.json) == 2                       # one TF_CONFIG per task
    assert json.loads(at.json[0].value)["task"] == {"type": "worker", "index": 0}


def test_invalid_port_is_shown_next_to_its_row(page):
    rows = [_row(host="node1", tf_port=12345), _row(host="node2", tf_port=70000)]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    msgs = errors(at)
    assert any(m.startswith("Row 2:") and "tf_port" in m and "out of range" in m for m in msgs), msgs
    assert len(at.json) == 0                       # no TF_CONFIG for a broken cluster


def test_duplicate_host_port_is_an_error(page):
    rows = [_row(host="node1", tf_port=12345), _row(host="node1", tf_port=12345)]
    at = page("cluster", cluster_rows=rows)
    assert not at.exception
    msgs = errors(at)
    assert any(m.startswith("Row 2:") and "both use node1:12345" in m for m in msgs), msgs
    assert any("Fix the errors" in i.value for i in at.info)


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
