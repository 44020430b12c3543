"""A record of who did what: one JSON line per action in ``<runs>/audit.jsonl``.

Launch, stop, save now, export, restore, dump stacks and trust-host each append a line (who, when, from where, run,
action, arguments, outcome) from the backend itself, so the console, the command line and the
Python API are recorded alike. Lines are only ever appended, each in one ``write`` of a file
opened ``O_APPEND`` (several processes append at once without mixing lines). Recording never
stops an action: a full disk or an unwritable file loses the line, not the action. Readers skip
lines that are not whole records and name them, as for run records.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import time
from pathlib import Path
from typing import Callable

from backend.errors import ConsoleError
from backend.access import identity, roles, viewing

FILE = "audit.jsonl"
ACTIONS = ("launch", *roles.RUN_ACTIONS, *roles.ADMIN_ACTIONS)   # what is recorded (and checked against the roles)
FIELDS = ("time", "who", "action", "run", "args", "outcome")


def append(root: Path, action: str, *, run: str | None, args: dict | None = None, outcome: str = "ok",
           who: identity.Identity | None = None) -> bool:
    """One line for ``action``; False when it could not be written (the action goes on)."""
    try:   # an identity or argument that will not serialize loses the line too, never the action
        line = {"time": time.time(), "who": (who or identity.current()).as_dict(), "action": action,
                "run": run, "args": {k: v for k, v in (args or {}).items() if v is not None}, "outcome": outcome}
        data = (json.dumps(line, default=str) + "\n").encode()
        fd = os.open(Path(root) / FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return True
    except (OSError, TypeError, ValueError):
        return False


@contextlib.contextmanager
def recording(root: Path, action: str, *, run: str | None, args: dict | None = None,
              owner: Callable[[], dict | None] = lambda: None):
    """Around one action: first the roles file's say (roles.py; refused before anything is
    done), then its line, with ``args`` and how it ended (``ok``, ``refused: ...`` for one of
    our errors, ``failed: ...`` for anything else). ``owner`` gives who started the run, asked
    only where a roles file needs it."""
    try:
        allowed(root, action, owner=owner)
        yield
    except ConsoleError as err:
        append(root, action, run=run, args=args, outcome=f"refused: {err.problem}")
        raise
    except BaseException as err:
        append(root, action, run=run, args=args, outcome=f"failed: {type(err).__name__}")
        raise
    append(root, action, run=run, args=args)


def recorded(action: str, *arg_names: str) -> Callable:
    """Decorate a run action ``fn(run, ...)`` with ``recording``: its line names the arguments
    ``arg_names`` and the run; the run's owner is what the roles file is asked about."""
    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(run, *args, **kw):
            bound = signature.bind(run, *args, **kw)
            details = {name: bound.arguments.get(name) for name in arg_names}
            with recording(Path(run.local_dir).parent, action, run=run.run_id, args=details,
                           owner=lambda: run.state.owner):
                return fn(run, *args, **kw)
        return inner
    return wrap


def trusted_host(root: Path, host: str, fingerprint: str, *, port: int | None = None, **kw):
    """``hosts.trust.trust_host_key``, checked (admins only, with a roles file) and recorded in the
    audit of the runs folder ``root``: the Cluster page and ``tfconsole trust-host`` both call this."""
    from backend.hosts.trust import trust_host_key
    with recording(root, "trust_host", run=None, args={"host": host, "port": port, "fingerprint": fingerprint}):
        return trust_host_key(host, fingerprint, port=port, **kw)


def allowed(root: Path, action: str, *, owner: Callable[[], dict | None] = lambda: None) -> None:
    """AccessDenied (or the roles file's own error) unless whoever acts may take ``action``
    (on a run that ``owner()`` started)."""
    found = roles.load(root)
    if found is not None:
        roles.check(found, identity.current(), action, owner=owner())


def read(root: Path) -> tuple[list[dict], list[str]]:
    """Every whole line, oldest first, and what was skipped (``line N: why``). AccessDenied for
    a console's person with no role (viewing.py)."""
    viewing.require(root)
    try:
        text = (Path(root) / FILE).read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return [], []
    entries, skipped = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            entry = json.loads(raw)
        except ValueError:
            skipped.append(f"line {number}: not a whole JSON line")
            continue
        who = identity.Identity.of(entry.get("who")) if isinstance(entry, dict) else None
        if who is None or not isinstance(entry.get("action"), str) or not isinstance(entry.get("time"), (int, float)):
            skipped.append(f"line {number}: not an audit record")
            continue
        entries.append({**entry, "who": who})
    return entries, skipped


def matching(entries: list[dict], *, run: str | None = None, user: str | None = None,
             action: str | None = None) -> list[dict]:
    return [e for e in entries if (run is None or e.get("run") == run)
            and (user is None or e["who"].name == user) and (action is None or e["action"] == action)]
