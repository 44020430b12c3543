"""Roles from one small file (issue 48): who may do what, and a bad file refused, never read as
"everyone may"."""
from __future__ import annotations

import pytest

from backend.access import roles
from backend.access.identity import Identity
from backend.errors import SpecError

ALICE, BOB, CAROL = (Identity("alice@example.org", "console", "desk"), Identity("bob", "cli", "laptop"),
                     Identity("carol@example.org", "console", "desk", groups=("ml-team",)))


def write(tmp_path, text: str):
    (tmp_path / roles.FILE).write_text(text)
    return roles.load(tmp_path)


def test_no_roles_file_means_one_persons_console(tmp_path, monkeypatch):
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    assert roles.load(tmp_path) is None
    roles.check(None, BOB, "stop", owner={"name": "someone"})   # nothing enforced


def test_each_role_may_do_what_it_says(tmp_path, monkeypatch):
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    found = write(tmp_path, "users:\n  alice@example.org: admin\n  bob: operator\ngroups:\n  ml-team: viewer\n")
    roles.check(found, ALICE, "stop", owner={"name": "bob"})                 # admin: every run
    roles.check(found, BOB, "launch")
    roles.check(found, BOB, "export", owner={"name": "bob"})                 # operator: own runs
    with pytest.raises(roles.AccessDenied, match="bob .* is an operator: stop acts on the runs they started, "
                                                  "and alice@example.org started this one"):
        roles.check(found, BOB, "stop", owner={"name": "alice@example.org"})
    with pytest.raises(roles.AccessDenied, match="is a viewer: launch is for operators"):
        roles.check(found, CAROL, "launch")                                  # by her group
    with pytest.raises(roles.AccessDenied, match="has no role on this console"):
        roles.check(found, Identity("mallory", "cli", "x"), "launch")        # unnamed: no access
    roles.check(found, Identity("svc", "keeper", "console-host"), "stop", owner={"name": "bob"})   # the run's keeper
    everyone = write(tmp_path, "users: {bob: operator}\noperators_act_on: all\ndefault: viewer\n")
    roles.check(everyone, BOB, "stop", owner={"name": "alice@example.org"})
    with pytest.raises(roles.AccessDenied, match="is a viewer"):
        roles.check(everyone, Identity("mallory", "cli", "x"), "save_now", owner={"name": "mallory"})


@pytest.mark.parametrize("text, said", [
    ("users:\n  bob: superuser\n", "users.bob: unknown role 'superuser'. Use one of viewer, operator, admin"),
    ("users:\n  bob: [operator\n", "is not YAML line 3: expected ',' or ']'"),
    ("admins: [bob]\n", "unknown field 'admins'"),
    ("users: bob\n", "users must be a mapping"),
    ("default: root\n", "default: unknown role 'root'"),
    ("operators_act_on: some\n", "operators_act_on is 'some'"),
])
def test_a_bad_roles_file_is_refused_naming_what_to_fix(tmp_path, monkeypatch, text, said):
    monkeypatch.delenv("TFCONSOLE_ROLES", raising=False)
    with pytest.raises(SpecError) as err:
        write(tmp_path, text)
    assert said in str(err.value), str(err.value)


def test_a_roles_file_named_by_the_environment_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("TFCONSOLE_ROLES", str(tmp_path / "nowhere.yaml"))
    with pytest.raises(SpecError, match="no roles file at"):
        roles.load(tmp_path)
