"""A run folder is never read as an option (issue 27): a workdir starting with '-' once became
``python -S -c<code>#/runs/...`` on the host, and the clean-up after the failed launch ran the code.

The spec refuses such a workdir (tests/unit/test_spec.py); here validation is bypassed, as a
TaskSpec built by older code or a hand-edited state file would, and the launch must still run
nothing but our own commands: every path argument is made absolute or ``./``-prefixed.
"""
from __future__ import annotations

import sys

import pytest

from backend.runs import launcher
from backend.hosts import remote
from backend.config import spec
from backend.errors import ConsoleError
from backend.hosts.local import LocalTransport
from backend.runs.store import RunStore
from backend.records.state import TaskState


def payload(marker) -> str:
    return f"-cimport os;os.system('touch {marker}')#"


@pytest.fixture
def unchecked_workdir(monkeypatch, tmp_path):
    """TaskSpec without the workdir check, and a private home for the local host."""
    monkeypatch.setitem(spec._TASK_FIELDS, "workdir", (lambda value, where: value, "tfconsole"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()


def test_a_launch_with_an_option_like_workdir_runs_no_code(unchecked_workdir, tmp_path):
    marker = tmp_path / "pwned"
    task = spec.TaskSpec(role=spec.Role.CHIEF, host="127.0.0.1", tf_port=23999, python=sys.executable,
                         transport=spec.TransportKind.LOCAL, workdir=payload(marker))
    job = spec.job_from_dict({"kind": "command", "command": [sys.executable, "-c", "pass"]})
    try:
        run = launcher.launch(spec.ClusterSpec((task,)), job, store=RunStore(tmp_path / "runs"),
                              preflight=launcher.Preflight.SKIP)
        run.wait(timeout=60)
        run.stop(grace_s=3)
    except ConsoleError:
        pass   # failing is fine; running the workdir as code is not
    assert not marker.exists(), "the workdir was run as Python code"


def test_run_dirs_become_path_arguments(unchecked_workdir, tmp_path):
    """Every consumer of a stored run folder (a state file from before the check) gets ./-x."""
    assert TaskState("chief-0", 0, "h", "-c x/runs/r").remote_run_dir == "./-c x/runs/r"
    assert TaskState("chief-0", 0, "h", "/abs/runs/r").remote_run_dir == "/abs/runs/r"
    h = remote.Host(LocalTransport(), sys.executable, payload(tmp_path / "pwned2") + "/runs/r")
    assert h.run_dir.startswith("./-c")
    with pytest.raises(ConsoleError):
        remote.status(h, ["chief-0"])
    assert not (tmp_path / "pwned2").exists()
