"""Sign-in drawn (``TFCONSOLE_AUTH=oidc``): Streamlit's ``st.login`` / ``st.user`` / ``st.logout``
with the checks of ``console.signin``. Until a person is signed in, a page shows only the sign-in
(or what is wrong with its settings or the provider); once signed in, every action the session
takes acts as them (``session_identity``, installed as ``identity``'s resolver) and the roles file
says what they may do. A sign-in older than the roles file's ``session_hours`` is asked again.
"""
from __future__ import annotations

import os

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from backend.access import identity, roles
from backend.errors import ConsoleError
from backend.runs.store import default_root
from console import signin
from console.markdown_safe import md_escape

SOURCE = ".streamlit/secrets.toml (or the file given to --auth-file)"
NOBODY = identity.Identity("(nobody signed in)", "console", signin.UNKNOWN)
PROBLEM_KEY = "_sign_in_problem"   # what the provider said when Sign in was clicked, for the next run


def _settings() -> signin.Settings:
    try:
        auth = st.secrets.get("auth")
    except (FileNotFoundError, OSError, ValueError):   # no secrets file, or not TOML
        auth = None
    return signin.settings(auth.to_dict() if hasattr(auth, "to_dict") else auth, SOURCE)


def _hours() -> float:
    try:
        found = roles.load(default_root())
    except ConsoleError:
        found = None   # a bad roles file refuses every action already, saying why
    return found.session_hours if found else roles.SESSION_HOURS


def in_session() -> bool:
    """Whether a page is being served (not a background thread, which acts as whoever submitted
    its work: console.background)."""
    return get_script_run_ctx(suppress_warning=True) is not None


def _user() -> dict:
    return st.user.to_dict() if in_session() else {}


def where() -> str:
    """The browser's address, as Streamlit or the trusted proxy's header gives it, else "unknown"
    (``console.signin.where_from``): never the console's own host name."""
    try:
        ip, headers = st.context.ip_address, st.context.headers
    except Exception:  # noqa: BLE001 - no request behind this run
        ip, headers = None, {}
    return signin.where_from(ip, headers, proxy_header=os.environ.get(signin.PROXY_ENV))


def session_identity() -> identity.Identity | None:
    """The signed-in person of the session being served; ``NOBODY`` for a session nobody (or
    nobody still valid) signed in to: the console's own OS user never stands in for a visitor.
    None outside of a served page."""
    if not in_session():
        return None
    user = _user()
    if not user.get("is_logged_in") or signin.too_old(user, _hours()):
        return NOBODY
    try:
        return signin.identity_of(user, where())
    except ConsoleError:
        return NOBODY


def signed_in() -> bool:
    """Whether this session may act now (for callbacks and fragments: draws nothing)."""
    user = _user()
    return bool(user.get("is_logged_in")) and not signin.too_old(user, _hours())


def _problem_page(title: str, text: str) -> bool:
    st.title(title)
    st.error(md_escape(text))
    return False


def _sign_in(found: signin.Settings) -> None:
    """Sign in's click: the provider asked again, uncached (the page may have been drawn while it
    answered), so a provider down now gets the page naming it, not Streamlit's bare
    "Authentication error"."""
    problem = signin.provider_problem(found, fresh=True)
    if problem:
        st.session_state[PROBLEM_KEY] = problem
        return
    st.login(*((found.name,) if found.name else ()))


def gate(*, sidebar: bool = True) -> bool:
    """True when a person is signed in (their name and a Sign out in the sidebar, drawn when
    ``sidebar``: each page's ``guard()`` draws it, and the entry script checks first without it);
    else the sign-in page, or the page saying which setting or what at the provider is wrong, and False."""
    identity.set_default(NOBODY)
    identity.set_resolver(session_identity)
    try:
        signin.require_libraries()
        found = _settings()
    except signin.SignInError as err:
        return _problem_page("Sign-in is not set up", str(err))
    user = _user()
    if not user.get("is_logged_in"):
        problem = st.session_state.pop(PROBLEM_KEY, None) or signin.provider_problem(found)
        if problem:
            return _problem_page("The identity provider cannot be reached", problem)
        st.title("Sign in")
        st.info("This console is shared by a team: sign in with your team's account. What you may "
                "do (look, start and stop your runs, or everything) is in the console's roles file.")
        st.button(f"Sign in with {found.provider}", type="primary", on_click=_sign_in, args=(found,))
        return False
    try:
        who = signin.identity_of(user, where())
    except signin.SignInError as err:
        st.button("Sign out", on_click=st.logout)
        return _problem_page("Signed in, but not known", str(err))
    if signin.too_old(user, _hours()):
        st.title("Your sign-in has expired")
        st.info(f"Sign-ins last {_hours():g} hours on this console (session_hours in its roles file).")
        st.button("Sign in again", type="primary", on_click=st.logout)
        return False
    if not sidebar:
        return True
    with st.sidebar:
        st.caption("Signed in as")
        st.text(who.name)   # from the provider: plain text, never Markdown or HTML
        st.button("Sign out", on_click=st.logout, key="sign_out")
    return True
