"""The login gate drawn: the entry script's ``gate()``, every page's ``guard()``, and the token check
of widget callbacks and self-refreshing fragments. What the token is, where it lives and how it is
compared: ``console.tokens`` (no Streamlit, so ``python -m console`` starts without it)."""
from __future__ import annotations

import functools
import os
import threading

import streamlit as st

from backend.access import identity, viewing
from backend.errors import ConsoleError
from backend.runs.store import default_root
from console import tokens
from console.markdown_safe import md_escape
from console.ui import signin

SESSION_KEY = "_login_token"
LET_IN_KEY = "_login_let_in"   # this session was let in once: a later refusal must hide the page list


def _request_host() -> str | None:
    try:
        return st.context.headers.get("Host")
    except Exception:  # noqa: BLE001 - no request behind this run (a bare script run)
        return None


def _wrong_host() -> str | None:
    return tokens.host_refusal(_request_host(), address=st.get_option("server.address"))


_announced: set[str] = set()   # tokens this process has printed, so each is printed once
_lock = threading.Lock()        # sessions run in threads: one of them creates and prints


def _server_token() -> str:
    with _lock:
        token = tokens.read_token(tokens.token_path())
        if token not in _announced:   # `streamlit run console/app.py` prints no token itself
            _announced.add(token)
            if os.environ.get(tokens.PRINTED_ENV) == tokens.printed_mark(token):
                return token
            address = st.get_option("server.address") or "localhost"
            print("tfconsole: open " + tokens.url(token, address=address, port=st.get_option("server.port"),
                                                  base_path=st.get_option("server.baseUrlPath") or ""),
                  flush=True)
        return token


def _refuse(*, wrong: bool) -> None:
    st.title("Login token needed")
    if wrong:
        st.error("That token is not this console's (`make run` makes a new one at every start).")
    st.info("This console starts training on its owner's hosts, so it opens only with its URL "
            f"that carries the login token (`/?{tokens.PARAM}=...`). Ask the console's owner for "
            f"that URL: it is printed where the console started, and kept in `{tokens.FILE_NAME}` "
            "in the console's runs folder, readable by the owner only.")


def _hide_pages() -> None:
    """A browser keeps the page list of the last ``st.navigation`` it was sent: a session that was
    let in and has lost the token is sent a list of one page, the refusal, which shows no list."""
    st.navigation([st.Page(_nothing, title="Login token needed", url_path="login", default=True)],
                  position="hidden")


def _nothing() -> None:
    """The refusal's page: never run (the gate's script run ends before ``run()``)."""


def _check(*, entry: bool = False) -> tokens.Access | None:
    """The access setting in force, when this session may see the console: it presented the token
    (now or before), or the token is off, or its person signed in; and its person may look (a
    roles file that gives them no role shows them nothing). Else None, with the refusal (or what
    to fix) drawn and nothing else. ``entry``: the entry script's call; the signed-in person's
    sidebar is drawn by the page's (once a run)."""
    wrong_host = _wrong_host()
    if wrong_host:
        st.title("Wrong address")
        st.text(wrong_host)            # the name came from the request: plain text, no Markdown
        return None
    try:
        setting = tokens.access()
        if setting is tokens.Access.OIDC:
            admitted = signin.gate(sidebar=not entry)
        else:
            identity.set_resolver(_token_holder)
            admitted = setting is tokens.Access.NONE or _holds_presented_token()
    except ConsoleError as err:
        st.error(str(err))
        admitted = False
    if admitted and not _may_look(setting):
        admitted = False
    ss = st.session_state
    if admitted:
        ss[LET_IN_KEY] = True
        return setting
    if ss.get(LET_IN_KEY):             # every run: a stale page list must not come back
        _hide_pages()
    return None


def _holds_presented_token() -> bool:
    """Whether the session holds the console's token, taking one from the URL first; the refusal
    drawn when not."""
    token = _server_token()
    ss = st.session_state
    presented = st.query_params.get(tokens.PARAM)
    if presented is not None:
        del st.query_params[tokens.PARAM]     # out of the address bar, the history and screenshots
        if tokens.matches(presented, token):
            ss[SESSION_KEY] = presented
    if tokens.matches(ss.get(SESSION_KEY), token):
        return True
    ss.pop(SESSION_KEY, None)          # an old token (the file was replaced) is no use again
    _refuse(wrong=presented is not None)
    return False


def _token_holder() -> identity.Identity | None:
    """The person a token (or token-off) console serves: its OS user, from the browser's address;
    None outside of a served page (a background thread acts as whoever submitted its work)."""
    if not signin.in_session():
        return None
    return identity.Identity(identity.local("console").name, "console", signin.where())


def _may_look(setting: tokens.Access) -> bool:
    """Whether the person served may look at all (``backend.access.viewing``); else the page that
    says why and nothing else (with a Sign out for a signed-in person)."""
    refused = viewing.refusal(default_root())
    if refused is None:
        return True
    st.title("Signed in, but no access" if setting is tokens.Access.OIDC else "No access")
    st.error(md_escape(refused))   # names from the provider: text, never Markdown
    if setting is tokens.Access.OIDC:
        st.button("Sign out", on_click=st.logout, key="no_access_sign_out")
    return False


def gate() -> bool:
    """For the entry script, before the page list: False (the refusal drawn) for a session without
    the token, and then nothing else may render, not even the names of the pages. The script run
    must then end normally, not by ``st.stop()``: only a run that ends normally makes Streamlit
    forget the page's fragments, whose timers still tick in the browser and would draw into a
    page that is gone and blank it (docs/facts.md #15)."""
    return _check(entry=True) is not None


def holds_token() -> bool:
    """Whether this session may act now: the token is off, or the session holds the current one.
    Draws nothing; for widget callbacks, which Streamlit runs before the page's ``guard()``."""
    if _wrong_host():
        return False
    try:
        setting = tokens.access()
        if setting is tokens.Access.TOKEN:
            token = _server_token()    # under the lock: a missing file is made (and printed) once
            if not tokens.matches(st.session_state.get(SESSION_KEY), token):
                return False
        elif setting is tokens.Access.OIDC and not signin.signed_in():
            return False
    except ConsoleError:
        return False
    return viewing.refusal(default_root()) is None


def still_allowed() -> None:
    """The first call of every self-refreshing fragment (see ``fragment``). A fragment's rerun runs
    only its own function, not the page's ``guard()``, so a session whose token was revoked (the
    file deleted or replaced) would go on drawing logs and curves. Such a session reruns the whole
    app at once instead: its gate drops the old token and shows the refusal (or the error)."""
    if not holds_token():
        st.rerun(scope="app")


def fragment(*, run_every: float | None):
    """``st.fragment(run_every=...)`` for the pages' live parts: each run checks the token first."""
    def wrap(body):
        @functools.wraps(body)         # the fragment's id comes from its name: keep the body's
        def checked() -> None:
            still_allowed()
            body()
        return st.fragment(checked, run_every=run_every)
    return wrap


def guard() -> bool:
    """The first call on every page (AppTest and a direct run reach a page without the entry
    script): the same check, and the notice when the token is off. False: refused (the refusal
    drawn); the page then draws nothing else and returns, never ``st.stop()`` (see ``gate``)."""
    setting = _check()
    if setting is None:
        return False
    if setting is tokens.Access.NONE:
        st.warning(tokens.OFF_NOTICE, icon=":material/lock_open:")
    return True
