"""What the person at this console may do, asked of the roles file the backend enforces
(backend/access/roles.py), so a page offers no button its user may not use (issue 48).
The backend checks again at the action: this only keeps the page honest."""
from __future__ import annotations

from pathlib import Path

from backend.access import identity, roles
from backend.errors import ConsoleError


def refusal(runs_root: Path, action: str, owner: dict | None = None) -> str | None:
    """Why this console's person may not take ``action`` (on a run ``owner`` started), or None.
    A roles file with a mistake refuses everything, saying what to fix."""
    try:
        found = roles.load(runs_root)
    except ConsoleError as err:
        return str(err)
    return roles.refusal(found, identity.current(), action, owner=owner)
