"""Who acts: the person or process behind a launch, a stop, a save (issue 48).

The console, the command line and the Python API each say who they act for once, at start
(``set_default``: the OS user and this machine, and how they came: ``console``, ``cli``,
``python``, ``keeper``); a request made for someone else (a signed-in user of a shared console)
runs inside ``acting_as``. Everything that records an owner or an audit line asks ``current()``.
"""
from __future__ import annotations

import contextlib
import contextvars
import getpass
import os
import socket
from dataclasses import asdict, dataclass
from typing import Iterator

from backend.plain import term_safe

NAME_MAX = 200


@dataclass(frozen=True)
class Identity:
    name: str        # an OS user, or a signed-in email
    via: str         # console, cli, python, keeper
    host: str        # the machine the action was taken on
    groups: tuple[str, ...] = ()   # a signed-in user's groups claim (roles may name a group)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["groups"] = list(self.groups)
        return out if self.groups else {k: v for k, v in out.items() if k != "groups"}

    @classmethod
    def of(cls, data: object) -> "Identity | None":
        """From a record's dict; None for a record from before owners, or a damaged one."""
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("name", "via", "host")):
            return None
        groups = data.get("groups") or []
        return cls(data["name"], data["via"], data["host"],
                   tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else ())

    def shown(self) -> str:
        """``name (via on host)``, made plain: a name holding control characters or markup from
        an identity provider is shown as text (``term_safe``), never obeyed."""
        return term_safe(f"{self.name[:NAME_MAX]} ({self.via} on {self.host})")


def local(via: str = "python") -> Identity:
    """This process's OS user on this machine."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):   # no passwd entry (a container's uid)
        user = f"uid {os.getuid()}"
    return Identity(user, via, socket.gethostname())


_DEFAULT: list[Identity] = []
_ACTING: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("tfconsole_acting", default=None)


def set_default(identity: Identity) -> None:
    """Who this process acts for unless told otherwise (its front says so at start)."""
    _DEFAULT[:] = [identity]


def current() -> Identity:
    return _ACTING.get() or (_DEFAULT[0] if _DEFAULT else local())


@contextlib.contextmanager
def acting_as(identity: Identity) -> Iterator[None]:
    token = _ACTING.set(identity)
    try:
        yield
    finally:
        _ACTING.reset(token)
