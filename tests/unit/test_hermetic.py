"""The test session never touches the real home, runs folder or ssh-agent (tests/conftest.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import HOME, truthy


def test_the_session_runs_in_a_private_home():
    assert os.environ["HOME"] == str(HOME) and HOME.name.startswith("tfconsole-test-home-")
    assert Path("~").expanduser() == HOME
    assert Path(os.environ["TFCONSOLE_RUNS"]).is_relative_to(HOME)
    assert "SSH_AUTH_SOCK" not in os.environ   # the real agent's keys cannot make a test pass


@pytest.mark.parametrize("value,expected", [("true", True), ("1", True), ("yes", True), ("TRUE", True),
                                            ("", False), (None, False), ("0", False), ("false", False)])
def test_any_truthy_ci_value_counts(value, expected):
    assert truthy(value) is expected
