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


def test_ci_run_sets_ci_itself(tmp_path):
    """.ci/run exports CI=true whatever the caller set; a stand-in `make` reports what it got."""
    import subprocess

    from tests.conftest import ROOT
    (tmp_path / "make").write_text('#!/bin/sh\necho "CI=$CI make $*"\n')
    (tmp_path / "make").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "CI=true make test"


@pytest.mark.parametrize("ci,outcome", [("true", "failed"), ("1", "failed"), ("", "skipped")])
def test_a_missing_real_part_fails_in_ci_and_skips_elsewhere(tmp_path, ci, outcome):
    import subprocess
    import sys

    from tests.conftest import ROOT
    (tmp_path / "test_part.py").write_text(
        "from tests.conftest import require\n\ndef test_part():\n    require('a part', False)\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "-c", "/dev/null", str(tmp_path / "test_part.py")],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert f"1 {outcome}" in out.stdout, out.stdout[-1500:]


def test_make_run_listens_on_loopback_only():
    import subprocess

    from tests.conftest import ROOT
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "run"], capture_output=True, text=True, check=True).stdout
    import re
    assert re.search(r"--(server\.)?address 127\.0\.0\.1\b", out), out
