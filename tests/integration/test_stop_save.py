"""Stop with saving (issue 29 item 4): `tfconsole stop RUN --save` on a real two-worker harness run
saves one step on every worker, says which, and Restore lists that step first; plain stop is
unchanged."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from backend import checkpoints
from backend.runs import launcher
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import autograph_files, processes_of, temp_left, wait_for
from tests.integration.test_cli import ROOT, cli

pytestmark = pytest.mark.slow


@pytest.fixture
def files(tmp_path, python_path):
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                          "tf_port": sshd.free_port(), "python": python_path,
                          "workdir": str(tmp_path / "host")} for _ in range(2)]}
    job = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
           "params": {"epochs": 1, "steps_per_epoch": 100000, "log_every": 10,
                      "checkpoint_every": 0, "pace_s": 0.005},
           "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1"}}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path


def test_stop_save_saves_one_step_on_every_worker_and_says_which(files):
    runs = files / "runs"
    before = autograph_files()
    run_id = cli("launch", str(files / "cluster.yaml"), str(files / "job.yaml"), runs=runs).stdout.strip()
    run = launcher.attach(run_id, store=RunStore(runs))
    try:
        wait_for(lambda: "step 20/" in cli("logs", run_id, "--task", "worker-1", runs=runs).stdout,
                 180, "step 20")
        out = cli("stop", run_id, "--save", runs=runs).stdout
    finally:
        if run.reload().live:
            run.stop(grace_s=2)
    found = re.search(r"saved step (\d+) on every worker", out)
    assert found, out
    step = int(found.group(1))
    assert "no process left" in out
    chief = [c["step"] for c in checkpoints.list_checkpoints(run)]
    other = [c["step"] for c in checkpoints.list_checkpoints(run, "worker-1")]
    assert chief == other == [step]            # the only checkpoint: the one stop saved
    state = run.reload()
    assert state.phase == "stopped" and f"saved at step {step}" in state.attempts[-1].reason
    assert state.attempts[-1].last_step == step
    assert processes_of(run) == []
    assert temp_left(run, before) == []   # issue 47: TensorFlow's autograph files outlived the stop
