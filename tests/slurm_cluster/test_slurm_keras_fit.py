"""A Keras user's `model.fit` script with the console's callback, on the Slurm engine (issue 26:
"every feature that a harness job gets", Slurm included).

Real parts: the one-node test cluster (rig/slurm.py), two tasks of one ``srun`` step under
MultiWorkerMirroredStrategy with tf_keras, examples/keras_fit.py unchanged as a command job; the
console's own monitor, checkpoint listing, Save now and Export.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend import checkpoints
from backend.config.slurm_spec import slurm_from_dict
from backend.config.spec import job_from_dict
from backend.client.harness import layout
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.watch.metrics import MetricsStore
from rig import sshd
from tests.conftest import processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def slurm_cluster_spec(folder: Path, python: str):
    return slurm_from_dict({"kind": "slurm", "host": "localhost", "transport": "local", "partition": "debug",
                            "tasks_per_node": 2, "time_limit": "10", "python": python,
                            "workdir": str(folder / "shared"), "tf_port": sshd.free_port(span=2)})


def fit_job(*args: str):
    return job_from_dict({"kind": "command",
                          "command": [str(ROOT / "examples" / "keras_fit.py"), *args],
                          "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}})


def metrics(run) -> list[dict]:
    path = Path(run.state.chief.remote_run_dir) / layout.METRICS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_a_fit_job_on_slurm_shows_each_workers_loss_lists_checkpoints_saves_now_and_exports(
        slurm_cluster, tmp_path, python_path):
    run = launcher.launch(slurm_cluster_spec(tmp_path, python_path),
                          fit_job("--epochs", "2", "--steps", "60", "--pace", "0.05"),
                          store=RunStore(tmp_path / "runs"))
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        wait_for(lambda: sorted(store.tasks()) == ["chief-0", "worker-0"]
                 and min(len(store.series(t)) for t in store.tasks()) >= 2, 300,
                 "two metric points from each Slurm task")
        chief, worker = (store.series(t).loss for t in ("chief-0", "worker-0"))
        assert chief[-1] != worker[-1]          # each task's own loss, not one number twice
        saved = checkpoints.save_now(run, wait_s=120)
        assert saved % 10 == 0                  # at a sync point, which both tasks join
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run)]
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
        run.wait(timeout=300)
    finally:
        monitor.stop()
        if run.state.live:
            run.stop(grace_s=5)
    assert run.state.phase == "finished", run.log_tail("chief-0")
    assert {m["task"] for m in metrics(run)} == {"chief-0", "worker-0"}
    listed = {c["step"]: c for c in checkpoints.list_checkpoints(run)}
    assert {60, 120, saved} <= set(listed)     # epoch ends and the Save now
    assert listed[60]["epoch"] == 1 and listed[120]["epoch"] == 2
    assert set(listed[120]["losses"]) == {"chief-0", "worker-0"}
    result = checkpoints.export(run, step=120, name="fit-120")
    assert result["match"] is True and result["step"] == 120
    assert set(result["formats"]) == {"savedmodel", "keras"}
    assert processes_of(run) == []
