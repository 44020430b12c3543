"""The Audit page (issue 48): the audit's lines, newest first, filtered by run, person and
action; a damaged line named; a provider's name with markup shown as text."""
from __future__ import annotations

from backend.access import audit
from backend.access.identity import Identity


def test_the_audit_page_shows_who_did_what_filtered(page, runs_dir):
    runs_dir.mkdir(parents=True, exist_ok=True)
    alice, eve = Identity("alice", "cli", "desk"), Identity("eve <b>x</b> [a](http://e.x)", "console", "web")
    audit.append(runs_dir, "launch", run="r1", args={"kind": "command"}, who=alice)
    audit.append(runs_dir, "stop", run="r1", outcome="refused: eve is a viewer", who=eve)
    audit.append(runs_dir, "stop", run="r1", args={"save": True}, who=alice)
    with open(runs_dir / audit.FILE, "a") as fh:
        fh.write("{not json\n")
    at = page("audit")
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["action"]) == ["stop", "stop", "launch"]                 # newest first
    assert list(table["who"]) == ["alice", "eve <b>x</b> [a](http://e.x)", "alice"]   # as text
    assert any("1 damaged line(s)" in w.value and "line 4" in w.value for w in at.warning)
    at.selectbox(key="audit_user").set_value("alice").run()
    at.selectbox(key="audit_action").set_value("stop").run()
    table = at.dataframe[0].value
    assert list(table["outcome"]) == ["ok"] and list(table["arguments"]) == ["save=True"]
