"""The one error family pages catch, re-exported for them.

Pages import only ``streamlit`` and ``console.*`` (pages -> console -> backend), yet the console
functions they call raise the backend's ``ConsoleError`` (``SpecErrors`` among them). Re-exporting
it here, in this one place, lets pages catch it without reaching into ``backend``.
"""
from __future__ import annotations

from backend.errors import ConsoleError, SpecErrors

__all__ = ["ConsoleError", "messages"]


def messages(err: ConsoleError) -> list[str]:
    """One line per problem: each error of a ``SpecErrors``, else the error's own text."""
    if isinstance(err, SpecErrors):
        return [str(e) for e in err.errors]
    return [str(err)]
