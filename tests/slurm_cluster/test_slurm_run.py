"""Runs on a real one-node Slurm cluster (tests/slurm.py): submitted, watched and stopped through
the command line and the Python API, as an operator on the login node would."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.harness import layout
from backend.launcher import attach
from backend.runs import RunStore
from tests import sshd
from tests.conftest import processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def cli(*args: str, runs: Path, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def slurm_file(folder: Path, python: str, **fields) -> Path:
    """A cluster file for the test cluster: the console runs on its login node (local)."""
    data = {"kind": "slurm", "host": "localhost", "transport": "local", "partition": "debug",
            "nodes": 1, "tasks_per_node": 2, "cpus_per_task": 1, "time_limit": "10",
            "python": python, "workdir": str(folder / "shared"), "tf_port": sshd.free_port(), **fields}
    path = folder / "slurm-cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def job_file(folder: Path, **params) -> Path:
    job = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
           "params": {"epochs": 1, "steps_per_epoch": 30, "log_every": 5, "checkpoint_every": 10, **params}}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def metrics(run) -> list[dict]:
    path = Path(run.state.chief.remote_run_dir) / layout.METRICS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_two_task_job_through_the_cli_runs_to_its_last_step(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    out = cli("launch", str(slurm_file(tmp_path, python_path)), str(job_file(tmp_path)),
              "--wait", "300", runs=runs)
    run_id = out.stdout.splitlines()[0]
    assert out.stdout.splitlines()[-1] == f"run {run_id}: finished", out.stdout
    run = attach(run_id, store=RunStore(runs))
    rows = metrics(run)
    last = max(r["step"] for r in rows)
    assert last == 30, rows[-1]
    # Every worker's own loss at the last logged step: two tasks, each its own value.
    at_last = [r for r in rows if r["step"] == last]
    assert {r["task"] for r in at_last} >= {"chief-0", "worker-0"}, at_last
    status = cli("status", run_id, runs=runs).stdout
    assert "finished" in status and "exited(0)" in status, status
    assert not processes_of(run)
