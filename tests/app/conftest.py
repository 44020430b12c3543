"""AppTest fixtures: a private runs folder per test and a helper that opens one page."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT

TIMEOUT = 120   # a Start runs the preflight (imports TensorFlow) and launches two processes


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("TFCONSOLE_RUNS", str(root))
    yield root
    from backend.errors import ConsoleError
    from backend.launcher import attach
    from backend.runs import RunStore
    from console import state
    state._registry(str(root.resolve())).close()   # stop monitors this test started
    for run_state in RunStore(root).list():       # and never leave a worker behind
        if run_state.live:
            try:
                attach(run_state.run_id, store=RunStore(root)).stop(grace_s=3)
            except ConsoleError:
                pass


@pytest.fixture
def page(runs_dir):
    def open_page(name: str, **session) -> AppTest:
        at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=TIMEOUT)
        for key, value in session.items():
            at.session_state[key] = value
        return at.run()
    return open_page


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def local_rows() -> list[dict]:
    """The default two local workers, on free ports (other suites may hold the default ones)."""
    import sys

    from backend.spec import cluster_to_dict, default_cluster
    from console.forms import cluster_rows
    rows = cluster_rows(cluster_to_dict(default_cluster(sys.executable)))
    for row in rows:
        row["tf_port"] = free_port()
    return rows
