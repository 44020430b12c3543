"""Who may look: the question every reader a console page uses asks first.

A console's page is drawn for one person (the token's holder, or whoever signed in). With a roles
file, whoever it gives no role may see nothing at all: not a page, not a run, not a line of the
audit. The pages' gate asks this before it draws anything (``console.ui.auth``), and the readers
behind the pages (``RunStore.load``/``list_all``, ``audit.read``, a sweep's status) ask it again,
so a page added later cannot forget it. Outside of a page (the command line, a keeper, the
console's background threads) nobody is being served and nothing is asked here: those act with
the OS user's own rights over the runs folder, and their actions are checked where they act.
"""
from __future__ import annotations

from pathlib import Path

from backend.access import identity, roles
from backend.errors import ConsoleError


def refusal(root: Path, who: identity.Identity | None = None) -> str | None:
    """Why ``who`` (by default the person being served) may not look at the runs under ``root``,
    or None. A roles file with a mistake refuses, naming the mistake."""
    who = who or identity.serving()
    if who is None:
        return None
    try:
        roles.check(roles.load(root), who, roles.VIEW)
    except ConsoleError as err:
        return str(err)
    return None


def require(root: Path) -> None:
    """AccessDenied (or the roles file's own error) unless the person being served may look."""
    who = identity.serving()
    if who is not None:
        roles.check(roles.load(root), who, roles.VIEW)
