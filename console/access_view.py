"""What the person at this console may do, asked of the roles file the backend enforces
(backend/access/roles.py), so a page offers no button its user may not use.
The backend checks again at the action: this only keeps the page honest."""
from __future__ import annotations

from pathlib import Path

from backend.access import identity, roles
from backend.errors import ConsoleError


def refusals(runs_root: Path, actions: tuple[str, ...], owner: dict | None = None) -> dict[str, str | None]:
    """Per action, why this console's person may not take it (on a run ``owner`` started), or
    None; the roles file read once for all of a page's buttons. A roles file with a mistake
    refuses everything, saying what to fix."""
    try:
        found = roles.load(runs_root)
    except ConsoleError as err:
        return dict.fromkeys(actions, str(err))
    who = identity.current()
    return {action: roles.refusal(found, who, action, owner=owner) for action in actions}


def refusal(runs_root: Path, action: str, owner: dict | None = None) -> str | None:
    """``refusals`` for one button."""
    return refusals(runs_root, (action,), owner)[action]
