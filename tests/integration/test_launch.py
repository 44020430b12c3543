"""Launch, status and stop for real: two TensorFlow worker processes, over sshd and locally."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend.runs import launcher
from backend.errors import MultiHostError
from backend.hosts.pool import Pool
from backend.hosts.preflight import PreflightFailed, run_preflight
from backend.runs.store import RunStore
from backend.config.spec import cluster_from_dict, job_from_dict
from rig import sshd
from tests.conftest import processes_of, ssh_task

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "examples" / "tf_config_script.py")


def script_job(*args: str, **env: str):
    return job_from_dict({"kind": "command", "command": [SCRIPT, *args], "env": env})


def test_preflight_over_ssh(ssh_cluster, ssh_options):
    with Pool(ssh_options) as pool:
        reports = run_preflight(ssh_cluster, pool)
    assert [r.ok for r in reports] == [True, True], [r.problems() for r in reports]


def test_preflight_names_unreachable_host_and_taken_port(ssh_cluster, ssh_options, client_key, python_path, tmp_path):
    import socket
    busy = socket.socket()
    busy.bind(("", 0))
    busy.listen()
    data = {"tasks": [
        {**ssh_task(sshd.SSHHost("127.0.0.9", sshd.free_port(), tmp_path), "chief", sshd.free_port(),
                    client_key, python_path, tmp_path)},
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "python": python_path,
         "tf_port": busy.getsockname()[1], "workdir": str(tmp_path)},
    ]}
    with Pool(ssh_options) as pool:
        reports = run_preflight(cluster_from_dict(data), pool)
    busy.close()
    assert not reports[0].ok and "cannot connect" in reports[0].checks["ssh"]["error"]
    assert not reports[1].ok and "in use" in reports[1].checks["port"]["error"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ssh", "local"])
def test_two_workers_train_to_exit_0(kind, request, ssh_options, tmp_path):
    cluster = request.getfixturevalue(f"{kind}_cluster")
    run = launcher.launch(cluster, script_job("--steps", "20"), store=RunStore(tmp_path / "runs"),
                          options=ssh_options, preflight=launcher.Preflight.SKIP)
    statuses = run.wait(timeout=240)
    assert [(s.state, s.exit_code) for s in statuses] == [("exited", 0), ("exited", 0)], \
        [run.log_tail(s.name) for s in statuses]
    for t in run.state.tasks:  # mirrored locally, and both workers really trained
        log = (run.local_dir / "logs" / f"{t.name}.log").read_text()
        assert "step 20 loss" in log and "done" in log
    assert RunStore(tmp_path / "runs").load(run.run_id).phase == "finished"
    assert processes_of(run) == []


@pytest.mark.slow
def test_stop_mid_training_leaves_nothing(ssh_cluster, ssh_options, tmp_path):
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(ssh_cluster, script_job("--steps", "100000", "--sleep", "0.05"),
                          store=store, options=ssh_options, preflight=launcher.Preflight.SKIP)
    deadline = time.time() + 180
    while "step 3 loss" not in run.log_tail("worker-0") and time.time() < deadline:
        time.sleep(1)
    assert "step 3 loss" in run.log_tail("worker-0"), "training never started"
    assert processes_of(run)
    # A new process (here: a new handle from the saved state) reattaches and stops the run.
    again = launcher.attach(run.run_id, store=store, options=ssh_options)
    again.stop(grace_s=5)
    assert processes_of(run) == []
    assert [s.state for s in again.status()] == ["exited", "exited"]
    assert store.load(run.run_id).phase == "stopped"


@pytest.mark.slow
def test_one_task_failing_to_start_rolls_back_the_others(ssh_cluster, ssh_options, tmp_path):
    data = {"tasks": [dict(t) for t in __import__("backend.config.spec", fromlist=["x"]).cluster_to_dict(ssh_cluster)["tasks"]]}
    data["tasks"][1]["python"] = "/nonexistent/python3"
    cluster = cluster_from_dict(data)
    store = RunStore(tmp_path / "runs")
    with pytest.raises(MultiHostError) as err:
        launcher.launch(cluster, script_job("--steps", "100000", "--sleep", "0.05"), store=store,
                        options=ssh_options, preflight=launcher.Preflight.SKIP)
    assert "worker-0" in str(err.value) or "127.0.0.3" in str(err.value)
    (state,) = store.list()
    assert state.phase == "failed"
    run = launcher.attach(state.run_id, store=store, options=ssh_options)
    assert processes_of(run) == []


def test_launch_refuses_when_preflight_fails(ssh_cluster, ssh_options, tmp_path):
    data = __import__("backend.config.spec", fromlist=["x"]).cluster_to_dict(ssh_cluster)
    data["tasks"][1]["python"] = "/nonexistent/python3"
    store = RunStore(tmp_path / "runs")
    with pytest.raises(PreflightFailed, match="nonexistent"):
        launcher.launch(cluster_from_dict(data), script_job(), store=store, options=ssh_options)
    assert store.list() == []


def test_hostile_values_are_data_not_commands(ssh_cluster, ssh_options, tmp_path, python_path):
    canary = tmp_path / "pwned"
    hostile = f"$(touch {canary}); `touch {canary}`; touch {canary}"
    job = job_from_dict({"kind": "command", "env": {"HOSTILE": hostile},
                         "command": [python_path, "-c", "import os, sys; print(os.environ['HOSTILE'], sys.argv[1])", hostile]})
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    run.wait(timeout=60)
    assert f"{hostile} {hostile}" in run.log_tail("chief-0")
    assert not canary.exists()


KERAS3_FIT = """
import numpy as np, tensorflow as tf, keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
model.fit(np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32"), epochs=1, batch_size=16)
"""


@pytest.mark.slow
def test_status_explains_the_keras3_fit_failure(local_cluster, tmp_path, python_path):
    """A user's own script calling Keras 3 model.fit under MWMS: the status says why, plainly."""
    job = job_from_dict({"kind": "command", "command": [python_path, "-c", KERAS3_FIT]})
    store = RunStore(tmp_path / "runs")
    try:  # it fails within seconds: during launch's start check, or just after it
        run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    except MultiHostError as err:
        explained = str(err)
        run = launcher.attach(store.list()[0].run_id, store=store)
    else:
        statuses = run.wait(timeout=180)
        assert any(s.exit_code not in (0, None) for s in statuses), [run.log_tail(s.name) for s in statuses]
        explained = " ".join(s.diagnosis or "" for s in statuses)
    assert "Keras 3 model.fit does not work under MultiWorkerMirroredStrategy" in explained, explained
    assert processes_of(run) == []
