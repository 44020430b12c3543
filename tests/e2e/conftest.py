"""Fixtures of the browser tests."""
from __future__ import annotations

import pytest

from tests.e2e.browser import STREAMLIT, console


@pytest.fixture
def server(tmp_path):
    """The console as `streamlit run` starts it; yields (URL with the login token, runs folder)."""
    from console import tokens
    token = tokens.new_token(tokens.token_path(tmp_path / "runs"))
    with console(STREAMLIT, tmp_path) as served:
        yield tokens.url(token, address="127.0.0.1", port=int(served.url.rsplit(":", 1)[1])), served.runs
