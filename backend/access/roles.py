"""What each person may do: viewer, operator, admin, from one small YAML file.

The file is ``$TFCONSOLE_ROLES``, or ``roles.yaml`` in the runs folder. Without one, nothing is
enforced: one person on one machine (the token holder, the CLI's user) may do everything, as
before. With one, whoever it does not name has no access at all (``default:`` can say otherwise)::

    users:                      # a signed-in email, or an OS user for the CLI and Python
      alice@example.org: admin
      bob: operator
    groups:                     # a signed-in user's groups claim
      ml-team: operator
    default: viewer             # everyone else (leave it out: no access)
    operators_act_on: own       # own (their runs only) or all
    session_hours: 12           # a sign-in older than this is asked again (sign-in only)

viewer: sees runs, logs and curves (whoever has no role sees nothing: not a page, not a run). operator: launches, and stops, saves, exports, restores and
dumps the stacks of the runs they own (or every run, ``operators_act_on: all``). admin:
everything, and trusts hosts' SSH keys (the Cluster page, ``tfconsole trust-host``). A run's keeper
is not a person: it carries out the restart policy its owner launched with, unchecked.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from backend.access.identity import Identity
from backend.errors import ConsoleError, SpecError

FILE = "roles.yaml"
ROLES = ("viewer", "operator", "admin")
RUN_ACTIONS = ("stop", "save_now", "export", "restore", "dump_stacks", "profile")   # on one run: its owner matters
ADMIN_ACTIONS = ("trust_host",)   # the console's own settings: admins only
VIEW = "view"   # to look at all: every page, and the readers the pages use (backend/access/viewing.py)
KEEPER = "keeper"   # identity.via of a run's keeper (`tfconsole keep`, started by a launch)
SESSION_HOURS = 12.0   # how long a sign-in lasts unless the roles file says otherwise
FIX = "Ask an admin of this console to give you a role in its roles file."


class AccessDenied(ConsoleError):
    """The identity's role does not allow the action; the message names both."""


@dataclass(frozen=True)
class Roles:
    users: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)
    default: str | None = None
    all_runs: bool = False
    source: str = ""
    session_hours: float = SESSION_HOURS

    def role_of(self, who: Identity) -> str | None:
        if who.name in self.users:
            return self.users[who.name]
        found = [self.groups[g] for g in who.groups if g in self.groups]
        return max(found, key=ROLES.index) if found else self.default


def path_for(runs_root: Path) -> Path:
    return Path(os.environ.get("TFCONSOLE_ROLES") or Path(runs_root) / FILE)


def load(runs_root: Path) -> Roles | None:
    """The roles file, or None when there is none (nothing enforced). SpecError naming the line
    for bad YAML, an unknown role or a field it does not know: never access by default."""
    path = path_for(runs_root)
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):   # (a runs "folder" that is a file: said elsewhere)
        if os.environ.get("TFCONSOLE_ROLES"):
            raise SpecError("TFCONSOLE_ROLES", f"no roles file at {path}",
                            "Point it at your roles.yaml, or unset it for a one-person console.") from None
        return None
    except OSError as err:
        raise SpecError(str(path), f"cannot be read ({err.strerror or err})",
                        "Make it readable by the console's user; it decides who may do what.") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        marked = isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None
        where = f" line {err.problem_mark.line + 1}" if marked else ""
        raise SpecError(str(path), f"is not YAML{where}: {err.problem if marked else err}",
                        "Fix that line (users: / groups: mappings of name: role).") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "must be a mapping (users:, groups:, default:)", "See docs/team.md, \"A console for a team\".")
    unknown = set(data) - {"users", "groups", "default", "operators_act_on", "session_hours"}
    if unknown:
        raise SpecError(str(path), f"unknown field {sorted(unknown)[0]!r}",
                        "Use users, groups, default, operators_act_on and session_hours.")
    users, groups = _mapping(data, "users", path), _mapping(data, "groups", path)
    default = data.get("default")
    if default is not None:
        _role(default, "default", path)
    scope = data.get("operators_act_on", "own")
    if scope not in ("own", "all"):
        raise SpecError(str(path), f"operators_act_on is {scope!r}", "Write own or all.")
    hours = data.get("session_hours", SESSION_HOURS)
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0:
        raise SpecError(str(path), f"session_hours is {hours!r}", "Write a number of hours above 0, e.g. 12.")
    return Roles(users, groups, default, scope == "all", str(path), float(hours))


def _mapping(data: dict, key: str, path: Path) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise SpecError(str(path), f"{key} must be a mapping of name: role", f"Write {key}:, then one name: role a line.")
    for name, role in value.items():
        _role(role, f"{key}.{name}", path)
    return {str(k): v for k, v in value.items()}


def _role(role: object, where: str, path: Path) -> None:
    if role not in ROLES:
        raise SpecError(str(path), f"{where}: unknown role {role!r}", f"Use one of {', '.join(ROLES)}.")


def check(roles: Roles | None, who: Identity, action: str, *, owner: dict | None = None) -> None:
    """Raise AccessDenied unless ``who`` may take ``action`` (on a run that ``owner`` started)."""
    verb = "look" if action == VIEW else "act"
    if roles is None and who.provider:
        raise AccessDenied(f"{who.shown()} signed in, but this console has no roles file, so nobody "
                           f"signed in may {verb} (any account of the provider could otherwise)",
                           "Write roles.yaml in the runs folder naming who may do what (docs/team.md, "
                           "\"A console for a team\").")
    if roles is None:
        return   # no roles file: one person's console, as before
    if who.via == KEEPER:
        return   # a run's keeper acts for the run its owner started (a restart, a stop in its policy)
    role = roles.role_of(who)
    if role == "admin":
        return
    if role is None:
        raise AccessDenied(f"{who.shown()} has no role on this console ({roles.source}), so may "
                           f"not {verb}", FIX)
    if action == VIEW:
        return   # every role may look
    if action in ADMIN_ACTIONS:
        raise AccessDenied(f"{who.shown()} is {'a viewer' if role == 'viewer' else 'an operator'}: "
                           f"{action} is for admins", FIX)
    if role == "viewer":
        raise AccessDenied(f"{who.shown()} is a viewer: {action} is for operators and admins", FIX)
    if action in RUN_ACTIONS and not roles.all_runs and (owner or {}).get("name") != who.name:
        started = (owner or {}).get("name") or "someone else"
        raise AccessDenied(f"{who.shown()} is an operator: {action} acts on the runs they started, and "
                           f"{started} started this one", "Ask its owner or an admin.")


def refusal(roles: Roles | None, who: Identity, action: str, *, owner: dict | None = None) -> str | None:
    """What ``check`` would say, or None: a page asks before it offers a button."""
    try:
        check(roles, who, action, owner=owner)
    except AccessDenied as err:
        return str(err)
    return None
