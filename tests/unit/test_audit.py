"""Who did what (issue 48): the audit's lines are appended whole, read back with damaged lines
named, and writing one never stops an action."""
from __future__ import annotations

import json
import os

from backend.access import audit, identity


def test_lines_are_appended_and_read_back_with_damaged_ones_named(tmp_path):
    alice = identity.Identity("alice", "console", "desk")
    assert audit.append(tmp_path, "launch", run="r1", args={"kind": "harness", "none": None}, who=alice)
    with open(tmp_path / audit.FILE, "a") as fh:   # a line cut short by a crash, and a stray one
        fh.write('{"time": 1, "who": {"name": "x"\n[1, 2]\n')
    with identity.acting_as(identity.Identity("bob", "cli", "laptop")):
        audit.append(tmp_path, "stop", run="r1", args={"save": True}, outcome="refused: run r1 is finished")
    entries, skipped = audit.read(tmp_path)
    assert [(e["who"].name, e["action"], e["outcome"]) for e in entries] == [
        ("alice", "launch", "ok"), ("bob", "stop", "refused: run r1 is finished")]
    assert entries[0]["args"] == {"kind": "harness"}
    assert skipped == ["line 2: not a whole JSON line", "line 3: not an audit record"]
    assert [e["action"] for e in audit.matching(entries, user="bob")] == ["stop"]
    assert audit.matching(entries, run="r2") == []
    assert oct(os.stat(tmp_path / audit.FILE).st_mode & 0o777) == "0o600"


def test_an_audit_that_cannot_be_written_never_stops_the_action(tmp_path):
    (tmp_path / audit.FILE).mkdir()   # not a file: every append fails
    assert audit.append(tmp_path, "launch", run="r1") is False
    assert audit.append(tmp_path / "gone", "launch", run="r1") is False


def test_a_name_with_control_characters_or_markup_is_shown_as_text():
    who = identity.Identity("eve\x1b[2J<script>alert(1)</script>", "console", "desk")
    shown = who.shown()
    assert "\x1b" not in shown and "\\x1b[2J" in shown
    assert identity.Identity.of(json.loads(json.dumps(who.as_dict()))) == who
    assert identity.Identity.of({"name": 3}) is None and identity.Identity.of(None) is None


def test_who_acts_is_this_os_user_unless_a_front_says_otherwise():
    me = identity.local("python")
    assert identity.current().name == me.name
    with identity.acting_as(identity.Identity("carol@example.org", "console", "shared")):
        assert identity.current().name == "carol@example.org"
    assert identity.current().name == me.name
