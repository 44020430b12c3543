"""A cluster named by ~/.ssh/config aliases, end to end on real sshd and real TensorFlow workers:
TF_CONFIG carries addresses the workers can dial, preflight checks them from the workers' side,
and a peer the workers cannot resolve fails the start-up within its timeout, with the reason."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from backend.diagnosis import diagnose
from backend.runs import launcher
from backend.client.harness import layout
from backend.hosts.pool import Pool
from backend.hosts.ssh import SSHOptions
from backend.hosts.preflight import run_preflight
from backend.runs.store import RunStore
from backend.config.spec import cluster_from_dict, job_from_dict
from tests.conftest import alias_task, processes_of, wait_for

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = str(ROOT / "examples" / "synthetic.py")


def synthetic(**params):
    return job_from_dict({"kind": "harness", "module": SYNTHETIC, "params": {
        "epochs": 1, "steps_per_epoch": 12, "log_every": 4, "global_batch_size": 48, **params}})


def three_workers(python_path, tmp_path, **last):
    return cluster_from_dict({"tasks": [
        alias_task("h2", "worker", python_path, tmp_path / "a"),
        alias_task("h3", "worker", python_path, tmp_path / "b"),
        alias_task("h2", "worker", python_path, tmp_path / "c", **last)]})


# A name under .localhost (RFC 6761: loopback only, like the test hosts) that nothing resolves here.
NOWHERE = "nohost.localhost"


def unresolvable() -> str:
    with pytest.raises(socket.gaierror):   # a precondition, said loudly rather than skipped
        socket.getaddrinfo(NOWHERE, 1)
    return NOWHERE


def worker_tf_config(run, name: str) -> dict:
    task = run.task(name)
    info = json.loads(Path(layout.task_file(task.remote_run_dir, name, "json")).read_text())
    return json.loads(info["tf_config"])


@pytest.mark.slow
def test_three_worker_alias_cluster_runs_to_its_last_step(operator_ssh, ssh_hosts, python_path, tmp_path):
    cluster = three_workers(python_path, tmp_path)
    # SSHOptions() as an operator has it: ~/.ssh/config and ~/.ssh/known_hosts, no other help.
    run = launcher.launch(cluster, synthetic(), store=RunStore(tmp_path / "runs"), options=SSHOptions())
    try:
        statuses = run.wait(timeout=600)
        assert [(s.state, s.exit_code) for s in statuses] == [("exited", 0)] * 3, \
            [run.log_tail(s.name) for s in statuses]
        cfg = worker_tf_config(run, "worker-1")
        ports = [t.tf_port for t in cluster.tasks]
        assert cfg["cluster"]["worker"] == [f"{ssh_hosts[0].address}:{ports[0]}",
                                            f"{ssh_hosts[1].address}:{ports[1]}",
                                            f"{ssh_hosts[0].address}:{ports[2]}"]
        assert "step 12/12" in run.log_tail("worker-0")
    finally:
        run.stop(grace_s=5)
    assert processes_of(run) == []


def test_preflight_checks_every_peer_from_the_workers_side(operator_ssh, python_path, tmp_path):
    cluster = three_workers(python_path, tmp_path, address=unresolvable())
    with Pool(SSHOptions()) as pool:
        reports = {r.task: r for r in run_preflight(cluster, pool)}
    port = cluster.tasks[2].tf_port
    for name in ("worker-0", "worker-1"):
        error = reports[name].checks["peers"]["error"]
        assert f"worker-2 at {NOWHERE}:{port}: the name does not resolve" in error
        assert "address" in error   # the fix names the address column
    assert reports["worker-2"].checks["peers"]["ok"], reports["worker-2"].checks["peers"]


@pytest.mark.slow
def test_a_peer_nobody_can_resolve_fails_start_up_with_the_reason(operator_ssh, python_path, tmp_path):
    cluster = three_workers(python_path, tmp_path, address=unresolvable())
    job = job_from_dict({"kind": "harness", "module": SYNTHETIC,
                         "params": {"epochs": 1, "steps_per_epoch": 12, "global_batch_size": 48,
                                    "startup_timeout_s": 5},
                         "restart": {"mode": "on_failure", "max_restarts": 3, "backoff_s": 0}})
    run = launcher.launch(cluster, job, store=RunStore(tmp_path / "runs"), options=SSHOptions(),
                          preflight=launcher.Preflight.SKIP)   # the harness's own bound is under test
    try:
        wait_for(lambda: not run.reload().live, 300, "the run to end")
        assert run.state.phase == "failed" and run.state.attempt == 1   # no restart of a hopeless start
        port = cluster.tasks[2].tf_port
        # The attempt's reason names the worker that gave up first. Its peer gives up within about
        # the same second, unless the keeper saw the first one and stopped the attempt before.
        reason = run.state.attempts[-1].reason
        first = reason.split()[0]
        assert first in ("worker-0", "worker-1"), reason
        assert f": {diagnose.STARTUP_UNREACHABLE}" in reason and f"worker-2 at {NOWHERE}:{port}" in reason
        for status in run.status()[:2]:   # worker-0 and worker-1, which cannot resolve worker-2
            gave_up = "cluster start-up failed" in run.log_tail(status.name)   # not stopped before
            if status.name == first or gave_up:
                assert status.diagnosis.startswith(diagnose.STARTUP_UNREACHABLE), status
        assert f"waiting for worker-2 at {NOWHERE}" in run.log_tail(first)
    finally:
        run.stop(grace_s=5)
    assert processes_of(run) == []
