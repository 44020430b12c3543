"""A host lost for good mid-run (its sshd and every process of the run there killed, never back):
with a spare in the cluster file the keeper moves that task to the spare and the run finishes
every step from the newest checkpoint; with no spare the run fails naming the host and what
would have saved it. Real sshd hosts on loopback, real TensorFlow workers (issue 39)."""
from __future__ import annotations

import os
import signal

import pytest

from backend.config.spec import cluster_from_dict, job_from_dict
from backend.runs import detached, launcher
from tests import conftest, sshd
from tests.conftest import processes_of, ssh_task
from tests.faults.conftest import PARAMS, SYNTHETIC, TF_ENV, metrics, record, wait_for, wait_phase

pytestmark = pytest.mark.slow
GONE_S = 3.0   # the keeper's bound for "gone for good", small so the test is short


@pytest.fixture
def own_hosts(tmp_path_factory, client_key, operator_ssh):
    """Two hosts of this test's own: one to lose for good, one spare (trusted in known_hosts)."""
    keys = client_key.parent / "authorized_keys"
    root = tmp_path_factory.mktemp("spares")
    hosts = [sshd.make_host(root, f"127.0.0.{n}", keys, home=str(conftest.HOME)) for n in (21, 22)]
    for n, host in zip((21, 22), hosts):
        operator_ssh.add(f"h{n}", host)
    yield hosts
    for n, host in zip((21, 22), hosts):
        operator_ssh.remove(f"h{n}")
        host.stop()


def job(**params):
    return job_from_dict({"kind": "harness", "module": SYNTHETIC, "params": {**PARAMS, "global_batch_size": 30, **params}, "env": TF_ENV,
                          "restart": {"mode": "on_failure", "max_restarts": 2, "backoff_s": 1.0,
                                      "stall_timeout_s": 120.0, "unreachable_grace_s": 30.0,
                                      "host_gone_s": GONE_S}})


def lose_host(run, host, task: str) -> None:
    """The host dies: its sshd (and every connection) killed, and the task's processes with it."""
    host.kill_all()
    os.killpg(run.task(task).pgid, signal.SIGKILL)


def cluster(ssh_hosts, doomed, client_key, python_path, tmp_path, spares=()):
    return cluster_from_dict({
        "tasks": [ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
                  ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h3"),
                  ssh_task(doomed, "worker", sshd.free_port(), client_key, python_path, tmp_path / "h21")],
        "spares": [{k: v for k, v in ssh_task(s, "worker", sshd.free_port(), client_key, python_path,
                                               tmp_path / f"spare{i}").items() if k != "role"}
                   for i, s in enumerate(spares)]})


def test_worker_host_lost_for_good_moves_to_the_spare(own_hosts, ssh_hosts, client_key, python_path,
                                                      tmp_path, store):
    doomed, spare = own_hosts
    run = launcher.launch(cluster(ssh_hosts, doomed, client_key, python_path, tmp_path, [spare]), job(),
                          store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 50 for r in metrics(run)), 180, "training past the first checkpoint")
    lost_group = run.reload().tasks[2].pgid
    lose_host(run, doomed, "worker-1")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished", state.attempts
    first, second = state.attempts[0], state.attempts[-1]
    assert len(state.attempts) == 2
    assert first.reason.startswith(f"worker-1: host {doomed.address} unreachable for "), first.reason
    assert first.reason.endswith(f"; moved to spare {spare.address}"), first.reason
    assert first.hosts["worker-1"] == doomed.address and second.hosts["worker-1"] == spare.address
    assert second.resume_step is not None and second.resume_step >= 40
    # Every reader agrees: the record's task, the cluster it launches, and status.
    again = launcher.attach(run.run_id, store=store)
    assert again.task("worker-1").host == spare.address == again.task_spec("worker-1").host
    assert "spares" not in state.cluster   # the one spare is used
    rows = [r for r in metrics(again) if r["task"] == "worker-1" and r["attempt"] == second.number]
    assert rows and max(r["step"] for r in rows) == PARAMS["steps_per_epoch"]
    assert min(r["step"] for r in rows) == second.resume_step + 1   # resumed, not from scratch
    wait_for(lambda: detached.keeper_pid(store.path(run.run_id)) is None, 30, "the keeper to exit")
    wait_for(lambda: processes_of(again) == [], 30, "no process of the run")
    assert not any(line.split()[1] == str(lost_group) for line in conftest.ps("pid=,pgid="))
    record("worker host lost for good, moved to a spare", resume_step=second.resume_step,
           restart_s=second.started - first.ended)


def test_host_lost_with_no_spare_fails_saying_what_would_have_saved_it(own_hosts, ssh_hosts, client_key,
                                                                       python_path, tmp_path, store):
    doomed, _ = own_hosts
    run = launcher.launch(cluster(ssh_hosts, doomed, client_key, python_path, tmp_path), job(),
                          store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 10 for r in metrics(run)), 180, "training")
    lose_host(run, doomed, "worker-1")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 120)
    assert state.phase == "failed" and len(state.attempts) == 1, state.attempts
    reason = state.attempts[0].reason
    assert f"worker-1: host {doomed.address} unreachable for" in reason, reason
    assert "no spare left for worker-1" in reason and "spares:" in reason, reason
    wait_for(lambda: processes_of(launcher.attach(run.run_id, store=store)) == [], 30, "no process of the run")
