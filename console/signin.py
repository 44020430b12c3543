"""Sign-in with the team's OpenID Connect provider, through Streamlit's own ``st.login``:
the settings checked, the provider asked whether it answers, the signed-in claims made an
``Identity``. Pure (no Streamlit): ``console.ui.signin`` draws the pages with it, and
``python -m console`` checks the settings before it starts.

The settings are Streamlit's, in its documented place: ``[auth]`` in ``.streamlit/secrets.toml``
(or the file given to ``tfconsole console --auth-file``): ``redirect_uri``, ``cookie_secret``, and
the provider's ``client_id``, ``client_secret``, ``server_metadata_url``, either in ``[auth]``
itself or in one ``[auth.NAME]`` table. Streamlit answers a provider that does not answer with a
bare "Authentication error"; we ask first, so the page can say which setting to look at.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from backend.access.identity import Identity
from backend.errors import ConsoleError

SHARED = ("redirect_uri", "cookie_secret")
PROVIDER = ("client_id", "client_secret", "server_metadata_url")
ASK_S = 3.0          # how long the provider may take to answer before the page says it does not
REMEMBER_S = 10.0    # a provider's answer is reused this long (the sign-in page reruns often)


class SignInError(ConsoleError):
    """Sign-in cannot work as set up; the message names the setting and what to do."""


@dataclass(frozen=True)
class Settings:
    name: str | None        # the ``[auth.NAME]`` table, None for settings in ``[auth]`` itself
    metadata_url: str
    client_id: str
    client_secret: str
    source: str

    @property
    def provider(self) -> str:
        return self.name or "default"


def require_libraries() -> None:
    """Streamlit's sign-in routes import Authlib's Starlette client (and httpx) only when a person
    clicks Sign in; missing, the click ends in a bare server error. Checked at start instead."""
    try:
        import authlib.integrations.starlette_client  # noqa: F401
    except ImportError as err:
        raise SignInError(f"Sign-in needs the Python package {err.name or 'Authlib'}, which is not installed.",
                          "Install the console's requirements: .venv/bin/pip install -r requirements.txt.") from None


def read_file(path: Path) -> Mapping:
    """The ``[auth]`` table of a secrets file (for ``python -m console`` before it starts)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise SignInError(f"Cannot read the sign-in settings {path}: {err.strerror or err}.",
                          "Give --auth-file a readable secrets.toml with an [auth] table.") from None
    except tomllib.TOMLDecodeError as err:
        raise SignInError(f"{path} is not TOML: {err}.", "Fix that line (secrets.toml syntax).") from None
    return data.get("auth") or {}


def settings(auth: Mapping | None, source: str) -> Settings:
    """The provider settings of ``[auth]``, or SignInError naming the first one missing or wrong."""
    if not auth:
        raise SignInError(f"Sign-in is on but {source} has no [auth] table.",
                          "Add [auth] with redirect_uri, cookie_secret, client_id, client_secret and "
                          "server_metadata_url (docs/team.md, \"Sign-in with the team's identity provider\"), or unset TFCONSOLE_AUTH.")
    for key in SHARED:
        if not str(auth.get(key) or "").strip():
            raise SignInError(f"[auth] in {source} has no {key}.", _fix(key))
    if not str(auth["redirect_uri"]).rstrip("/").endswith("/oauth2callback"):
        raise SignInError(f"[auth] redirect_uri in {source} is {auth['redirect_uri']!r}: it must be the "
                          "console's own address ending in /oauth2callback.", _fix("redirect_uri"))
    # A provider's table holds its client (as Streamlit tells one); client_kwargs is not one.
    tables = {k: v for k, v in auth.items() if isinstance(v, Mapping) and set(v) & set(PROVIDER)}
    if len(tables) > 1:
        raise SignInError(f"[auth] in {source} names {len(tables)} providers ({', '.join(sorted(tables))}).",
                          "Keep one [auth.NAME] table: the sign-in page offers one provider.")
    name, table = next(iter(tables.items()), (None, auth))
    where = f"[auth.{name}]" if name else "[auth]"
    for key in PROVIDER:
        if not str(table.get(key) or "").strip():
            raise SignInError(f"{where} in {source} has no {key}.", _fix(key))
    url = str(table["server_metadata_url"])
    if not url.startswith(("http://", "https://")):
        raise SignInError(f"{where} server_metadata_url in {source} is {url!r}, not an http(s) URL.",
                          _fix("server_metadata_url"))
    return Settings(name, url, str(table["client_id"]), str(table["client_secret"]), source)


def _fix(key: str) -> str:
    return {"redirect_uri": "Set it to http(s)://<this console's address>/oauth2callback, as registered with the provider.",
            "cookie_secret": "Set it to a long random string, e.g. the output of: python -c 'import secrets; print(secrets.token_hex(32))'.",
            "server_metadata_url": "Set it to the provider's <issuer>/.well-known/openid-configuration.",
            }.get(key, f"Copy {key} from the provider's page for this console's client.")


_answers: dict[tuple, tuple[float, str | None]] = {}


def provider_problem(found: Settings, *, now: float | None = None, fresh: bool = False) -> str | None:
    """None when the provider answers its discovery URL with OpenID metadata and takes this
    client's secret; else what is wrong, naming the setting. Remembered ``REMEMBER_S``, unless
    ``fresh`` (the Sign in click itself: the provider may have gone since the page was drawn)."""
    key = (found.metadata_url, found.client_id, found.client_secret)
    now = time.monotonic() if now is None else now
    if not fresh and key in _answers and now - _answers[key][0] < REMEMBER_S:
        return _answers[key][1]
    problem = _ask(found)
    _answers[key] = (now, problem)
    return problem


def _ask(found: Settings) -> str | None:
    where = f"server_metadata_url ({found.metadata_url}, in {found.source})"
    try:
        with urllib.request.urlopen(found.metadata_url, timeout=ASK_S) as reply:
            meta = json.loads(reply.read(1 << 20))
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return (f"The identity provider does not answer at {where}: {reason}. Check that URL and "
                "that the provider is up and reachable from the console's machine.")
    if not isinstance(meta, dict) or not all(meta.get(k) for k in ("issuer", "authorization_endpoint", "token_endpoint")):
        return (f"{where} answers, but not with OpenID Connect metadata (issuer, authorization_endpoint, "
                "token_endpoint). Point it at the provider's /.well-known/openid-configuration.")
    return _client_problem(found, str(meta["token_endpoint"]))


def _client_problem(found: Settings, token_url: str) -> str | None:
    """A wrong client secret shows only after the user has signed in (Streamlit then drops the
    sign-in without a word), so the token endpoint is asked now: a request the provider must
    refuse, and whose refusal says whether the client's credentials were right. Both ways a
    client may present them (Basic, as Authlib does by default, then in the body) must fail."""
    basic = base64.b64encode(f"{urllib.parse.quote(found.client_id)}:{urllib.parse.quote(found.client_secret)}".encode())
    tries = [({"grant_type": "client_credentials"}, {"Authorization": "Basic " + basic.decode()}),
             ({"grant_type": "client_credentials", "client_id": found.client_id,
               "client_secret": found.client_secret}, {})]
    if all(_refused_client(token_url, body, headers) for body, headers in tries):
        return (f"The identity provider refuses this console's client_id or client_secret (in "
                f"{found.source}). Copy both again from the provider's page for this client.")
    return None


def _refused_client(token_url: str, body: dict, headers: dict) -> bool:
    request = urllib.request.Request(token_url, data=urllib.parse.urlencode(body).encode(), headers=headers)
    try:
        urllib.request.urlopen(request, timeout=ASK_S).close()
    except urllib.error.HTTPError as err:
        try:
            return json.loads(err.read(1 << 16)).get("error") == "invalid_client"
        except (ValueError, AttributeError, OSError):
            return False
    except OSError:
        pass   # the sign-in itself will say more; the metadata answered
    return False


UNKNOWN = "unknown"   # where a person is when nothing trustworthy says
# The header a reverse proxy on the console's own machine (nginx, an auth proxy) sets to the
# browser's address, e.g. X-Forwarded-For; only this header, and only on connections that reach
# the console over loopback (from that proxy), is believed: a browser can send any header.
PROXY_ENV = "TFCONSOLE_PROXY_HEADER"


def where_from(ip: str | None, headers: Mapping, *, proxy_header: str | None) -> str:
    """Where a browser is: Streamlit's ``ip_address`` (None for a loopback connection: a browser
    on this machine, an SSH tunnel or a local proxy), or, over loopback, the trusted proxy's
    header (its last address: the one the proxy itself added), else "unknown"."""
    if isinstance(ip, str) and ip.strip():
        return ip.strip()
    value = headers.get(proxy_header) if proxy_header else None
    if isinstance(value, str) and value.strip():
        last = value.split(",")[-1].strip()
        try:
            return str(ipaddress.ip_address(last.strip("[]")))
        except ValueError:
            pass
    return UNKNOWN


def identity_of(user: Mapping, host: str) -> Identity:
    """The signed-in person, from the ID token's claims Streamlit keeps (``st.user``): the email
    names them (the roles file's ``users:``), ``groups`` may give roles too."""
    email = user.get("email")
    if not isinstance(email, str) or not email.strip():
        raise SignInError("The identity provider signed you in but sent no email claim, which this "
                          "console names people by.", "Ask the provider's admin to release the "
                          "'email' scope to this console's client, then sign in again.")
    groups = user.get("groups") or []
    groups = tuple(str(g) for g in groups) if isinstance(groups, list) else (str(groups),)
    return Identity(email.strip(), "console", host, groups, str(user.get("provider") or "default"))


def too_old(user: Mapping, hours: float, *, now: float | None = None) -> bool:
    """Whether the sign-in (the ID token's ``iat``) is older than ``hours``: Streamlit keeps its
    cookie 30 days; a team's console asks again sooner. No ``iat``: too old (age unknown)."""
    issued = user.get("iat")
    if isinstance(issued, bool) or not isinstance(issued, (int, float)):
        return True
    return (time.time() if now is None else now) - issued > hours * 3600
