"""Who may drive the console: a login token, like Jupyter's, on by default.

The console starts training on every host with its owner's SSH keys, so a browser session must
first present the console's token, once, in the URL (``/?token=...``, printed when the console
starts). The token lives in ``<runs folder>/.console-token``, created readable by the owner only
(mode 0600); it is compared in constant time, kept in the session once presented, taken out of
the address bar, and never logged. Deleting the file makes a new token at the next check and
shuts out every session that holds the old one, open pages too: their live parts (``fragment``)
check the token at every refresh (docs/facts.md #15). ``TFCONSOLE_AUTH=none`` turns the token off
(for a private SSH tunnel); every page then says so. docs/team.md, "Opening the console", tells the
operator. Pure: the token and the Host check; ``console.ui.auth`` draws the gate with them.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
from enum import Enum
from pathlib import Path
from urllib.parse import urlencode

from backend.errors import ConsoleError, SpecError
from backend.runs.store import default_root
from backend.files import write_private

ENV = "TFCONSOLE_AUTH"
FILE_NAME = ".console-token"
PARAM = "token"
OFF_NOTICE = (f"The login token is off ({ENV}=none): anyone who can open this address can start "
              "training on your hosts. Reach it only through a private SSH tunnel.")


# DNS rebinding: a web page on attacker.example whose name is made to point at
# 127.0.0.1 reaches a console on this machine with the browser's own rights; with the token off
# nothing else stops it. Such a request still says "Host: attacker.example", so every session is
# checked against the names the console is served under. IP literals always pass: a rebound
# request carries a DNS name, never an address.
HOSTS_ENV = "TFCONSOLE_HOSTS"   # more names to accept, comma separated (a tunnel's alias)
LOCAL_NAMES = {"localhost", "localhost.localdomain"}


def is_loopback(address: str) -> bool:
    if address.strip("[]").lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The name in a Host header, without its port: "[::1]:8501" -> "::1"."""
    name = header.strip().lower()
    if name.startswith("["):
        return name[1:name.find("]")] if "]" in name else name[1:]
    if name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name.rstrip(".")


def host_refusal(header: str | None, *, address: str | None) -> str | None:
    """None when ``header`` names this console (or is absent: only a browser sends one, and every
    browser does), else the refusal's text. ``address``: what the console listens on."""
    if not header:
        return None
    name = _host_name(header)
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    allowed = set(LOCAL_NAMES)
    address = (address or "").strip("[]").lower()
    if address in {"0.0.0.0", "::", ""}:   # every interface: the machine's own names too
        allowed |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    else:
        allowed.add(address)
    allowed |= {n.strip().lower().rstrip(".") for n in os.environ.get(HOSTS_ENV, "").split(",") if n.strip()}
    if name in allowed:
        return None
    return (f"This console is not served under the name {name!r}, so this request was refused: "
            "a web page can point a name of its own at this machine (DNS rebinding) to drive the "
            f"console. Open it as http://127.0.0.1:<port>/ (or the address it was started with), "
            f"or, if {name!r} is yours, start the console with {HOSTS_ENV}={name}.")


class Access(Enum):
    TOKEN = "token"   # the default: a session must present the token
    NONE = "none"     # anyone who reaches the port (a private tunnel only)
    OIDC = "oidc"     # a team's console: sign-in with its OpenID provider (console/signin.py)


def access() -> Access:
    """The access setting from ``$TFCONSOLE_AUTH``; raises SpecError for a value we do not know."""
    value = os.environ.get(ENV, Access.TOKEN.value).strip().lower()
    try:
        return Access(value)
    except ValueError:
        raise SpecError(ENV, f"{value!r} is not one of: token, none, oidc",
                        f"Unset {ENV} (the token is on by default), or set it to 'none' only "
                        "behind a private SSH tunnel.") from None


def token_path(root: Path | None = None) -> Path:
    """Where the token lives: in the runs folder ($TFCONSOLE_RUNS or ./runs), one per console."""
    return (root or default_root()) / FILE_NAME


def new_token(path: Path) -> str:
    """Write a fresh token to ``path``, readable by its owner only from the first byte on."""
    token = secrets.token_urlsafe(32)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, token + "\n")
    except OSError as err:
        raise ConsoleError(f"Cannot write the login token file {path}: {err.strerror}.",
                           "Make its folder writable by you, or point TFCONSOLE_RUNS at one "
                           "that is.") from None
    return token


def read_token(path: Path) -> str:
    """The console's token. A new one when the file is missing or empty, or when it is not ours
    alone (owned by someone else, or readable by others: the old token may have leaked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            info = os.fstat(fh.fileno())
            token = fh.read().strip()
    except FileNotFoundError:
        return new_token(path)
    except OSError as err:
        raise ConsoleError(f"Cannot read the login token file {path}: {err.strerror}.",
                           "Delete it (a new token is made at the next page load) and open the "
                           "URL printed then.") from None
    if not token or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return new_token(path)
    return token


def matches(presented: str | None, token: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about how much of it was right."""
    if not isinstance(presented, str):
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


def url(token: str, *, address: str, port: int, base_path: str = "") -> str:
    """The URL to open: the console's address with the token as ``?token=``."""
    base = base_path.strip("/")
    return f"http://{address}:{port}/{base + '/' if base else ''}?{urlencode({PARAM: token})}"


# Set by `python -m console` (make run) for the Streamlit process it starts: the SHA-256 of the
# token whose URL it printed itself, so the first page load does not print it again.
PRINTED_ENV = "TFCONSOLE_PRINTED"


def printed_mark(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
