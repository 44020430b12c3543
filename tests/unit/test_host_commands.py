"""The table of host commands (backend/client/harness/host_commands.py) is the one declaration
both sides are built from: the host's parser takes what the console's argv gives, every command
has its body where the table says and every body is declared, and a client keyword the table does
not declare fails on the console (not as a usage error on a host). No host here: the parser and
the argument lists are pure."""
from __future__ import annotations

import inspect

import pytest

from backend.client.harness import host_commands, hostctl
from backend.hosts import remote
from tests.conftest import ROOT


def test_every_command_has_its_body_and_every_body_is_declared():
    bodies = hostctl.handlers()
    assert set(bodies) == set(host_commands.COMMANDS)
    for subject, module in hostctl.SUBJECTS.items():
        public = {name for name, fn in inspect.getmembers(module, inspect.isfunction)
                  if fn.__module__ == module.__name__ and not name.startswith("_")}
        declared = {c.handler for c in host_commands.TABLE if c.subject == subject}
        assert public == declared, subject


@pytest.mark.parametrize("name, values, flags", [
    ("read", {"path": "logs/worker-0.log", "tail": 4096, "limit": 8}, ["--path", "logs/worker-0.log", "--tail", "4096", "--limit", "8"]),
    ("stop", {"task": ["chief-0", "worker-1"], "grace": 1.5, "group": ["chief-0=77"]},
     ["--task", "chief-0", "--task", "worker-1", "--group", "chief-0=77", "--grace", "1.5"]),
    ("write", {"path": "a", "offset": 0, "final": True, "private": False}, ["--path", "a", "--offset", "0", "--final"]),
    ("ckpt-hold", {"dir": "checkpoints", "step": "latest", "purpose": "export", "ttl": None},
     ["--dir", "checkpoints", "--step", "latest", "--purpose", "export"]),
    ("ckpt-verify", {"dir": "checkpoints", "step": [40, 20]}, ["--dir", "checkpoints", "--step", "40", "--step", "20"]),
    ("resumed", {"attempt": 2, "task": []}, ["--attempt", "2"]),
    ("request-save", {"stop": False}, []),
    ("save-done", {"name": "save-1-2.json"}, ["--name", "save-1-2.json"]),   # "name": the table's own word too
])
def test_what_the_console_sends_is_what_the_host_reads(name, values, flags):
    argv = host_commands.argv(name, **values)
    assert argv == flags
    parsed = hostctl.parser().parse_args([name, "--run", "/r", *argv])
    for key, value in values.items():
        if value is None or value == []:
            continue
        want = [str(v) for v in value] if isinstance(value, list) else value
        got = [str(v) for v in getattr(parsed, key)] if isinstance(value, list) else getattr(parsed, key)
        assert got == want, key


def test_a_keyword_the_table_does_not_declare_fails_on_the_console():
    with pytest.raises(ValueError, match="takes no offest"):
        host_commands.argv("read", path="x", offest=3)
    with pytest.raises(ValueError, match="needs path"):
        host_commands.argv("read", offset=3)


def test_no_argument_collides_with_the_clients_own_keywords():
    own = set(inspect.signature(remote._call).parameters) - {"values"}
    for command in host_commands.TABLE:
        assert not own & {a.name for a in command.args}, command.name


def test_the_host_refuses_what_the_table_calls_exclusive():
    with pytest.raises(SystemExit):
        hostctl.parser().parse_args(["read", "--run", "/r", "--path", "x", "--offset", "1", "--tail", "2"])


def test_the_wire_page_names_every_command():
    page = (ROOT / "docs" / "wire-protocol.md").read_text()
    missing = [c.name for c in host_commands.TABLE if f"| `{c.name}` |" not in page]
    assert not missing, f"docs/wire-protocol.md has no row for {missing}"
