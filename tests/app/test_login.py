"""The login token on every page (console/ui/auth.py): a session without it sees only the refusal."""
from __future__ import annotations

import logging

import pytest
from streamlit.testing.v1 import AppTest

from console import tokens
from console.ui import auth
from tests.app.conftest import as_owner
from tests.conftest import ROOT

SCRIPTS = ["console/app.py"] + [f"pages/{name}.py" for name in
                                ("launch", "monitor", "checkpoints", "cluster", "runs", "audit")]
TITLES = {"console/app.py": "Launch", "pages/launch.py": "Launch", "pages/monitor.py": "Monitor",
          "pages/checkpoints.py": "Checkpoints", "pages/cluster.py": "Cluster", "pages/runs.py": "Runs",
          "pages/audit.py": "Audit"}


def _open(script: str) -> AppTest:
    return AppTest.from_file(str(ROOT / script), default_timeout=60)


def _shown(at: AppTest) -> list[str]:
    """The type of every element the page drew, in the main area and the sidebar."""
    found = []

    def walk(node) -> None:
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)
        else:
            found.append(node.type)

    walk(at._tree)
    return found


def _refused(at: AppTest) -> bool:
    return (not at.exception and [t.value for t in at.title] == ["Login token needed"]
            and set(_shown(at)) <= {"title", "info", "error"})


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_session_without_the_token_sees_only_the_refusal(runs_dir, script):
    at = _open(script).run()
    assert _refused(at), _shown(at)
    assert "runs folder" in at.info[0].value and not at.error
    assert "Start" not in str(at._tree) and "TF_CONFIG" not in str(at._tree)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_wrong_token_is_refused(runs_dir, script):
    tokens.read_token(tokens.token_path())
    at = _open(script)
    at.query_params[tokens.PARAM] = "not-the-token"
    at.run()
    assert _refused(at), _shown(at)
    assert "not this console's" in at.error[0].value


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_token_in_the_url_opens_the_page_and_leaves_the_address_bar(runs_dir, script):
    at = _open(script)
    at.query_params[tokens.PARAM] = tokens.read_token(tokens.token_path())
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == [TITLES[script]]
    assert tokens.PARAM not in at.query_params
    at.run()                           # the session keeps it: the next run needs no URL
    assert [t.value for t in at.title] == [TITLES[script]]


def test_a_session_whose_token_is_replaced_stops_at_the_next_run(runs_dir):
    at = as_owner(_open("console/app.py")).run()
    assert [t.value for t in at.title] == ["Launch"]
    tokens.token_path().unlink()         # the owner revokes every URL handed out so far
    at.run()
    assert _refused(at), _shown(at)
    assert auth.SESSION_KEY not in at.session_state


def test_a_session_that_loses_its_token_stops_at_the_next_run(runs_dir):
    at = as_owner(_open("pages/cluster.py")).run()
    assert [t.value for t in at.title] == ["Cluster"]
    del at.session_state[auth.SESSION_KEY]
    at.run()
    assert _refused(at), _shown(at)


@pytest.mark.parametrize("script", SCRIPTS)
def test_with_the_token_off_every_page_says_so(runs_dir, monkeypatch, script):
    monkeypatch.setenv(tokens.ENV, "none")
    at = _open(script).run()
    assert not at.exception
    assert [t.value for t in at.title] == [TITLES[script]]
    assert [w.value for w in at.warning if "login token is off" in w.value] == [tokens.OFF_NOTICE]
    assert not tokens.token_path().exists()


def test_an_unknown_setting_shows_what_to_set_and_nothing_else(runs_dir, monkeypatch):
    monkeypatch.setenv(tokens.ENV, "off")
    at = _open("console/app.py").run()
    assert not at.exception
    assert set(_shown(at)) == {"error"}
    assert tokens.ENV in at.error[0].value and "'none'" in at.error[0].value


def test_the_token_is_never_logged(runs_dir, caplog):
    caplog.set_level(logging.DEBUG)
    token = tokens.read_token(tokens.token_path())
    at = _open("console/app.py")
    at.query_params[tokens.PARAM] = token
    at.run()
    at.switch_page("../pages/cluster.py").run()
    assert [t.value for t in at.title] == ["Cluster"]
    assert caplog.records and token not in caplog.text


def _live_page():
    """A page with a self-refreshing part, as Monitor and Checkpoints have; with ``revoke`` in the
    session, the owner deletes the token file while the page is being drawn."""
    import streamlit as st

    from console import tokens
    from console.ui import auth
    if not auth.guard():
        return
    st.title("Live")
    if st.session_state.pop("revoke", None):
        tokens.token_path().unlink()

    @auth.fragment(run_every=1)
    def panel() -> None:
        st.code("[chief-0] step 7 loss 0.25")

    panel()


def test_a_live_part_drawn_after_the_token_is_revoked_shows_only_the_refusal(runs_dir):
    """AppTest runs whole pages only (it cannot tick a fragment): here the live part runs after
    the revocation within the page's run; tests/e2e/test_login.py revokes between two ticks."""
    at = as_owner(AppTest.from_function(_live_page, default_timeout=60)).run()
    assert [t.value for t in at.title] == ["Live"] and at.code[0].value.startswith("[chief-0]")
    at.session_state["revoke"] = True
    at.run()
    assert _refused(at), _shown(at)
    assert "step 7" not in str(at._tree)
    assert auth.SESSION_KEY not in at.session_state
    at.run()                           # and it stays shut
    assert _refused(at), _shown(at)
