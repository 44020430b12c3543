"""The command line, run as a user would: `python -m backend ...` in a subprocess."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rig import sshd

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, runs: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def files(tmp_path, python_path):
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                          "tf_port": sshd.free_port(), "python": python_path,
                          "workdir": str(tmp_path / "host")} for _ in range(2)]}
    job = {"kind": "command", "command": [str(ROOT / "examples" / "tf_config_script.py"),
                                          "--steps", "100000", "--sleep", "0.05"]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path


def test_help_lists_every_command(tmp_path):
    out = cli("--help", runs=tmp_path).stdout
    for command in ("tf-config", "preflight", "launch", "status", "logs", "stop", "trust-host"):
        assert command in out


def test_tf_config_prints_json_per_task(files):
    out = json.loads(cli("tf-config", str(files / "cluster.yaml"), runs=files / "runs").stdout)
    assert list(out) == ["worker-0", "worker-1"]
    assert out["worker-1"]["task"] == {"type": "worker", "index": 1}
    assert len(out["worker-0"]["cluster"]["worker"]) == 2


def test_bad_input_is_one_line_and_non_zero(files):
    (files / "bad.yaml").write_text("tasks:\n  - {role: worker, host: 'a;b', tf_port: 99999999}\n")
    proc = cli("tf-config", str(files / "bad.yaml"), runs=files / "runs", check=False)
    assert proc.returncode != 0
    assert "tasks[0].host" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = cli("status", "no-such-run", runs=files / "runs", check=False)
    assert proc.returncode != 0 and "no run" in proc.stderr


@pytest.mark.slow
def test_launch_status_logs_stop(files):
    runs = files / "runs"
    run_id = cli("launch", str(files / "cluster.yaml"), str(files / "job.yaml"), runs=runs).stdout.strip()
    try:
        deadline = time.time() + 120
        while "step 2 loss" not in cli("logs", run_id, "--task", "worker-1", runs=runs).stdout:
            assert time.time() < deadline, "no training output"
            time.sleep(1)
        tasks = task_lines(cli("status", run_id, runs=runs).stdout)
        assert [line.split()[-1] for line in tasks] == ["running", "running"], tasks
    finally:
        assert "no process left" in cli("stop", run_id, runs=runs).stdout
    tasks = task_lines(cli("status", run_id, runs=runs).stdout)
    # A stop the user asked for is no error (issue 56): not "exited(1) -- ... KeyboardInterrupt"
    assert len(tasks) == 2 and all(line.rstrip().endswith("stopped (by the user)") for line in tasks), tasks


def task_lines(status: str) -> list[str]:
    return [line for line in status.splitlines() if line.strip().startswith("worker-")]
