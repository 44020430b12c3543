"""Every action button acts in its on_click callback (console/ui/widgets.py, ``action_button``):
Streamlit calls the callback as soon as the click reaches the server, whichever script run comes
next, so a click that starts a run which stops early, or is cut off by the next rerun, still acts
(the ``if st.button(...)`` pattern lost Stop clicks that way). Callbacks run before the page's
``guard()``: the helper checks the login token itself."""
from __future__ import annotations

from streamlit.runtime.state.session_state import SessionState
from streamlit.testing.v1 import AppTest

from tests.app.conftest import as_owner, errors


def _page() -> None:
    """A page with one action button; ``cut_short`` in the session: the run stops before it."""
    import streamlit as st

    from backend.errors import SpecError, SpecErrors
    from console.ui import widgets

    def act(label: str):
        st.session_state.setdefault("acted", []).append(label)
        if label == "bad":
            raise SpecErrors([SpecError("name", "a [link](http://x.example) is no name", "Type a plain name."),
                              SpecError("port", "0 is no port", "Use 1024-65535.")])
        return f"Saved {label}."

    if st.session_state.get("cut_short"):
        st.stop()   # as a click that lands while the page is redrawn: the button is not reached
    widgets.action_button("Save", "save", act, st.session_state.get("label", "it"))


def _open(runs_dir) -> AppTest:
    return as_owner(AppTest.from_function(_page, default_timeout=60)).run()


def test_a_click_runs_its_action_once_and_says_what_it_did(runs_dir):
    at = _open(runs_dir)
    assert "acted" not in at.session_state
    at.button(key="save").click().run()
    assert not at.exception
    assert at.session_state["acted"] == ["it"]
    assert [s.value for s in at.success] == ["Saved it."]
    at.run()                                       # a redraw neither acts again nor says it twice
    assert at.session_state["acted"] == ["it"] and not at.success


def test_a_click_acts_even_when_its_run_never_reaches_the_button(runs_dir):
    at = _open(runs_dir)
    at.session_state["cut_short"] = True
    at.button(key="save").click().run()
    assert not at.exception
    assert at.session_state["acted"] == ["it"]


def test_an_actions_error_shows_each_problem_as_text(runs_dir):
    at = _open(runs_dir)
    at.session_state["label"] = "bad"
    at.run()                                       # args are bound when the button is drawn
    at.button(key="save").click().run()
    assert not at.exception
    assert len(errors(at)) == 2 and "0 is no port" in errors(at)[1]
    assert "[link](http://x.example)" in errors(at)[0]                 # shown as typed, no link
    assert "\\[link\\]" in at.error[0].value
    assert not at.success


def test_a_session_without_the_token_cannot_act(runs_dir):
    from console import tokens
    at = _open(runs_dir)
    tokens.token_path().unlink()                   # the owner revokes every URL handed out so far
    at.button(key="save").click().run()
    assert "acted" not in at.session_state


def _delivered_twice(monkeypatch) -> None:
    """The server's handling of one click on a busy machine (issue 35, docs/facts.md #17): a
    fragment's timed refresh carried the click, then the click's own message did, and each
    message's widget states ran the callbacks before the page was drawn again."""
    once = SessionState.on_script_will_rerun

    def twice(self, fresh_widget_states, **kw):
        once(self, fresh_widget_states, **kw)
        once(self, fresh_widget_states, **kw)
    monkeypatch.setattr(SessionState, "on_script_will_rerun", twice)


def test_one_click_delivered_twice_acts_once_and_a_second_click_acts_again(runs_dir, monkeypatch):
    at = _open(runs_dir)
    with monkeypatch.context() as m:
        _delivered_twice(m)
        at.button(key="save").click().run()
    assert not at.exception
    assert at.session_state["acted"] == ["it"]          # not ["it", "it"]
    assert [s.value for s in at.success] == ["Saved it."]
    at.button(key="save").click().run()                 # the user clicks again: that acts
    assert at.session_state["acted"] == ["it", "it"]
