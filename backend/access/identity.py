"""Who acts: the person or process behind a launch, a stop, a save.

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
from typing import Callable, Iterator

from backend.term_text import term_safe

NAME_MAX = 200


@dataclass(frozen=True)
class Identity:
    name: str        # an OS user, or a signed-in email
    via: str         # console, cli, python, keeper
    host: str        # the machine the action was taken on
    groups: tuple[str, ...] = ()   # a signed-in user's groups claim (roles may name a group)
    provider: str = ""   # the identity provider that vouched for the name; "" for an OS user

    def as_dict(self) -> dict:
        out = asdict(self)
        out["groups"] = list(self.groups)
        return {k: v for k, v in out.items() if v or k not in ("groups", "provider")}

    @classmethod
    def of(cls, data: object) -> "Identity | None":
        """From a record's dict; None for a record from before owners, or a damaged one."""
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("name", "via", "host")):
            return None
        groups = data.get("groups") or []
        provider = data.get("provider")
        return cls(data["name"], data["via"], data["host"],
                   tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
                   provider if isinstance(provider, str) else "")

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
# A console's sessions each have their own person: the console installs a resolver that answers
# from the session being served (its token holder or signed-in user), None outside of one.
_RESOLVER: list[Callable[[], "Identity | None"]] = []
_ACTING: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("tfconsole_acting", default=None)


def set_default(identity: Identity) -> None:
    """Who this process acts for unless told otherwise (its front says so at start)."""
    _DEFAULT[:] = [identity]


def set_resolver(resolve: Callable[[], "Identity | None"] | None) -> None:
    """Ask ``resolve()`` first, before the default (None: no resolver)."""
    _RESOLVER[:] = [resolve] if resolve else []


def serving() -> Identity | None:
    """The person a console page is being drawn for (the resolver's answer), or None outside of
    a served page: the command line, a keeper, a console's background thread."""
    return _RESOLVER[0]() if _RESOLVER else None


def current() -> Identity:
    acting = _ACTING.get() or (_RESOLVER[0]() if _RESOLVER else None)
    return acting or (_DEFAULT[0] if _DEFAULT else local())


@contextlib.contextmanager
def acting_as(identity: Identity) -> Iterator[None]:
    token = _ACTING.set(identity)
    try:
        yield
    finally:
        _ACTING.reset(token)
