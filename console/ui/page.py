"""The top of every page: the login gate, the session's state initialised once, the title."""
import streamlit as st

from backend.access import identity
from console import tokens
from console.ui import auth, state


def open_page(title: str):
    """The session state, the page set up and titled; None for a session without the login
    token (the refusal drawn): the page then returns at once. A page never ends with
    ``st.stop()``: a run ended that way keeps the fragments it drew, whose timers can blank the
    browser's page (docs/facts.md #15), so each page is a function that returns instead."""
    if not auth.guard():
        return None
    # The token's holder acts as the OS user who started the console (one person, one machine):
    # runs it starts are theirs, and the audit says "console".
    # A signed-in console (TFCONSOLE_AUTH=oidc) acts as each session's person instead
    # (console/ui/signin.py, which set it up in the guard above).
    if tokens.access() is not tokens.Access.OIDC:
        identity.set_default(identity.local("console"))
    state.init()
    st.title(title)
    return st.session_state
