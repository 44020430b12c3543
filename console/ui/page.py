"""The top of every page: the login gate, the session's state initialised once, the title."""
import streamlit as st

from console.ui import auth, state


def open_page(title: str):
    """Stop here for a session without the login token; otherwise set up and title the page."""
    auth.guard()
    state.init()
    st.title(title)
    return st.session_state
