"""AppTest fixtures: a private runs folder per test and a helper that opens one page."""
from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT, autograph_files, ended_well, temp_left
from rig.sshd import free_port

TIMEOUT = 120   # a Start runs the preflight (imports TensorFlow) and launches two processes


def as_owner(at: AppTest) -> AppTest:
    """The session holds the console's login token, as after opening the printed URL (every page
    refuses a session without it: tests/app/test_login.py)."""
    from console import tokens
    from console.ui import auth
    at.session_state[auth.SESSION_KEY] = tokens.read_token(tokens.token_path())
    return at


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv("TFCONSOLE_RUNS", str(root))
    yield root
    from backend.errors import ConsoleError
    from backend.runs.launcher import attach
    from backend.runs.store import RunStore
    from console.ui import state
    state._registry(str(root.resolve())).close()   # stop monitors this test started
    for run_state in RunStore(root).list():       # and never leave a worker behind
        if run_state.live:
            try:
                attach(run_state.run_id, store=RunStore(root)).stop(grace_s=3)
            except ConsoleError:
                pass


def open_page(name: str, **session) -> AppTest:
    """Run one page script once, with ``session`` in its session state."""
    at = as_owner(AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=TIMEOUT))
    for key, value in session.items():
        at.session_state[key] = value
    return at.run()


@pytest.fixture
def page(runs_dir):
    return open_page


def errors(at: AppTest) -> list[str]:
    """The errors' text as the user reads it: job and host output is Markdown-escaped
    (console/markdown_safe.py), and a backslash escape shows as the character alone."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]


def local_rows() -> list[dict]:
    """The default two local workers, on free ports (other suites may hold the default ones)."""
    import sys

    from backend.config.spec import cluster_to_dict, default_cluster
    from console.forms import cluster_rows
    rows = cluster_rows(cluster_to_dict(default_cluster(sys.executable)))
    for row in rows:
        row["tf_port"] = free_port()
    return rows


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """A real two-worker run that has ended, with checkpoints: (runs root, run id)."""
    from backend.runs.launcher import Preflight, launch
    from backend.runs.store import RunStore
    from backend.config.spec import job_from_dict
    from console.forms import check_rows
    root = tmp_path_factory.mktemp("finished") / "runs"
    cluster, _ = check_rows(local_rows())
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 2, "steps_per_epoch": 30, "checkpoint_every": 20,
                                    "log_every": 5}})
    before = autograph_files()
    run = launch(cluster, job, store=RunStore(root), preflight=Preflight.SKIP)
    statuses = run.wait(timeout=180)
    assert ended_well(run, statuses), [run.log_tail(s.name, 2000) for s in statuses]
    assert temp_left(run, before) == []   # issue 47: a finished run left TensorFlow's temp files
    yield root, run.run_id
    from console.ui import state
    state._registry(str(root.resolve())).close()


@pytest.fixture
def on_finished(finished_run, monkeypatch):
    """Pages see the finished run's folder; returns a page opener and the run id."""
    root, run_id = finished_run
    monkeypatch.setenv("TFCONSOLE_RUNS", str(root))
    return open_page, run_id


def table_rows(tasks: list[dict]) -> list[dict]:
    """Cluster page rows for task dicts, as the page's table holds them."""
    from backend.config.spec import cluster_from_dict, cluster_to_dict
    from console.forms import cluster_rows
    return cluster_rows(cluster_to_dict(cluster_from_dict({"tasks": tasks})))


@pytest.fixture
def alias_rows(operator_ssh, python_path, tmp_path) -> list[dict]:
    """Chief h2, worker h3: hosts named only by their ~/.ssh/config aliases."""
    from tests.conftest import alias_task
    return table_rows([alias_task("h2", "chief", python_path, tmp_path / "h2"),
                       alias_task("h3", "worker", python_path, tmp_path / "h3")])
