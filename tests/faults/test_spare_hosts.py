"""A host lost for good mid-run (its sshd and every process of the run there killed, never back):
with a spare in the cluster file the keeper moves that task to the spare and the run finishes
every step from the newest checkpoint; with no spare the run fails naming the host and what
would have saved it. Real sshd hosts on loopback, real TensorFlow workers (issue 39)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from backend import checkpoints
from backend.config.spec import cluster_from_dict, job_from_dict
from backend.runs import detached, launcher
from rig import sshd
from tests import conftest
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


def job(shrink: str = "keep_global_batch", **params):
    return job_from_dict({"kind": "harness", "module": SYNTHETIC, "params": {**PARAMS, "global_batch_size": 30, **params}, "env": TF_ENV,
                          "restart": {"mode": "on_failure", "max_restarts": 2, "backoff_s": 1.0,
                                      "stall_timeout_s": 120.0, "unreachable_grace_s": 30.0,
                                      "host_gone_s": GONE_S, "shrink": shrink}})


def lose_host(run, host, task: str) -> None:
    """The host dies: its sshd (and every connection) killed, and the task's processes with it."""
    host.kill_all()
    os.killpg(run.task(task).pgid, signal.SIGKILL)


def cluster(ssh_hosts, doomed, client_key, python_path, tmp_path, spares=(), *, lose="worker-1", **more):
    """chief-0, worker-0, worker-1; the task ``lose`` on the doomed host."""
    hosts = [doomed, ssh_hosts[0], ssh_hosts[1]] if lose == "chief-0" else [*ssh_hosts, doomed]
    return cluster_from_dict({
        "tasks": [ssh_task(h, role, sshd.free_port(), client_key, python_path, tmp_path / h.address)
                  for h, role in zip(hosts, ("chief", "worker", "worker"))],
        "spares": [{k: v for k, v in ssh_task(s, "worker", sshd.free_port(), client_key, python_path,
                                               tmp_path / f"spare{i}").items() if k != "role"}
                   for i, s in enumerate(spares)], **more})


@pytest.mark.parametrize("lose", ["worker-1", "chief-0"])
def test_a_host_lost_for_good_moves_its_task_to_the_spare(lose, own_hosts, ssh_hosts, client_key, python_path,
                                                          tmp_path, store):
    doomed, spare = own_hosts
    run = launcher.launch(cluster(ssh_hosts, doomed, client_key, python_path, tmp_path, [spare], lose=lose), job(),
                          store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 50 for r in metrics(run)), 180, "training past the first checkpoint")
    lost_group = run.reload().tasks[0 if lose == "chief-0" else 2].pgid
    before = max(r["step"] for r in metrics(run))   # the old chief's, even when its host is the one lost
    lose_host(run, doomed, lose)
    lost_at = time.time()
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished", state.attempts
    first, second = state.attempts[0], state.attempts[-1]
    assert len(state.attempts) == 2
    assert first.reason.startswith(f"{lose}: host {doomed.address} unreachable for "), first.reason
    assert first.reason.endswith(f"; moved to spare {spare.address}"), first.reason
    assert first.hosts[lose] == doomed.address and second.hosts[lose] == spare.address
    assert second.resume_step is not None and second.resume_step >= 40
    # Every reader agrees: the record's task, the cluster it launches, and status.
    again = launcher.attach(run.run_id, store=store)
    assert again.task(lose).host == spare.address == again.task_spec(lose).host
    assert {s.name: s.host for s in again.status()}[lose] == spare.address
    assert "spares" not in state.cluster   # the one spare is used
    # Checkpoints lists the (new) chief's: saved after the resume, on the spare for a lost chief.
    steps = [c["step"] for c in checkpoints.list_checkpoints(again)]
    assert steps and max(steps) > second.resume_step, steps
    rows = [r for r in metrics(again) if r["task"] == lose and r["attempt"] == second.number]
    assert rows and max(r["step"] for r in rows) == PARAMS["steps_per_epoch"]
    assert min(r["step"] for r in rows) == second.resume_step + 1   # resumed, not from scratch
    wait_for(lambda: detached.keeper_pid(store.path(run.run_id)) is None, 30, "the keeper to exit")
    wait_for(lambda: processes_of(again) == [], 30, "no process of the run")
    assert not any(line.split()[1] == str(lost_group) for line in conftest.ps("pid=,pgid="))
    record(f"{lose}'s host lost for good, moved to a spare", resume_step=second.resume_step,
           steps_lost=before - second.resume_step, restart_s=second.started - first.ended,
           loss_to_training_s=min(r["time"] for r in rows) - lost_at)


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


# The job's restart.shrink: what the run keeps, as its reason ends (a harness job applies both).
KEPT = {"keep_global_batch": "global batch 30 kept (15 per task)",
        "keep_replica_batch": "per-replica batch 10 kept: global batch 30 -> 20, learning rate x0.6667 "
                              "(2 of 3 replicas; restart.shrink keep_replica_batch)"}


@pytest.mark.parametrize("shrink", list(KEPT))
def test_with_no_spare_and_min_workers_met_the_run_goes_on_with_fewer_tasks(shrink, own_hosts, ssh_hosts, client_key,
                                                                            python_path, tmp_path, store):
    doomed, _ = own_hosts
    run = launcher.launch(cluster(ssh_hosts, doomed, client_key, python_path, tmp_path, min_workers=2), job(shrink),
                          store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(r["step"] >= 50 for r in metrics(run)), 180, "training past the first checkpoint")
    lose_host(run, doomed, "worker-1")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished" and len(state.attempts) == 2, state.attempts
    first, second = state.attempts
    assert first.reason.startswith(f"worker-1: host {doomed.address} unreachable for "), first.reason
    assert first.reason.endswith("no spare left: runs on 2 task(s) without worker-1 (min_workers 2); "
                                 + KEPT[shrink]), first.reason
    assert set(second.hosts) == {"chief-0", "worker-0"} and [t.name for t in state.tasks] == ["chief-0", "worker-0"]
    rows = [r for r in metrics(run) if r["attempt"] == second.number]
    assert {r["task"] for r in rows} == {"chief-0", "worker-0"}
    # The synthetic job's learning rate is 0.01: scaled by 2/3 only when the job chose so.
    rate = 0.01 * (2 / 3 if shrink == "keep_replica_batch" else 1)
    assert {round(r["global"]["learning_rate"], 6) for r in rows} == {round(rate, 6)}, rows[-1]
    assert max(r["step"] for r in rows) == PARAMS["steps_per_epoch"] and second.resume_step >= 40
    wait_for(lambda: processes_of(launcher.attach(run.run_id, store=store)) == [], 30, "no process of the run")
