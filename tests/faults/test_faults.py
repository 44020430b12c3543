"""Failure injection with real TensorFlow workers: kill -9 a worker or the chief, kill the CLI,
a host whose sshd is down, a job that raises. Each records its measured figures (see record())."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from backend.engines import direct as hosts_engine
from backend.runs import detached
from backend.runs import launcher
from backend.errors import ConsoleError
from backend.config.spec import cluster_to_dict, job_to_dict
from rig import sshd
from tests.conftest import ps
from tests.faults.conftest import (PARAMS, assert_nothing_left, expected_steps, freeze_task, harness_job, kill_task,
                                   metrics, record, steps_seen, wait_for, wait_phase)

pytestmark = pytest.mark.slow
TOTAL = PARAMS["epochs"] * PARAMS["steps_per_epoch"]


def _past_first_checkpoint(run) -> bool:
    return any(r["step"] > PARAMS["checkpoint_every"] for r in metrics(run))


def _kill_and_recover(run, store, victim: str, name: str) -> None:
    wait_for(lambda: _past_first_checkpoint(run), 150, "training past the first checkpoint")
    killed = kill_task(run, victim)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 240)
    assert state.phase == "finished", (state, run.log_tail(victim))
    first, second = state.attempts[0], state.attempts[1]
    assert len(state.attempts) == 2 and victim in first.reason, state.attempts
    rows = metrics(run)
    died_at = max(r["step"] for r in rows if r["attempt"] == first.number)
    resumed = min(r["time"] for r in rows if r["attempt"] == second.number)
    redone = died_at - (second.resume_step or 0)
    assert 0 <= redone <= PARAMS["checkpoint_every"], (died_at, second.resume_step)
    for task in {r["task"] for r in rows}:
        assert steps_seen(rows, task) == expected_steps([0, second.resume_step or 0]), task
    assert second.last_step == TOTAL
    # Goodput (docs/goodput.md), as `tfconsole goodput RUN --json` prints it: the whole is the
    # record's wall-clock times its tasks, the causes add up to it, and the restart's cost is the
    # steps the chief's own lines say were trained and then thrown away.
    from backend import api
    found = api.attach(run.run_id, runs=store.root).goodput()
    assert found["total_s"] == pytest.approx((state.attempts[-1].ended - state.created) * len(state.tasks), rel=1e-6)
    assert sum(found["causes"].values()) == pytest.approx(found["total_s"], rel=1e-6)
    assert found["causes"]["unaccounted"] < 0.01 * found["total_s"], found
    assert 0 < found["goodput"] < 1 and found["attempts"][0]["lost_steps"] == redone, found
    if redone:
        assert found["attempts"][1]["text"].startswith(f"attempt 2 lost {redone} steps ("), found
    record(name, goodput=round(found["goodput"], 3), detect_s=first.ended - killed, restart_issued_s=second.started - killed,
           training_again_s=resumed - killed, killed_after_step=died_at,
           resumed_from=second.resume_step, steps_redone=redone, attempts=len(state.attempts))
    assert_nothing_left(run, store)


def test_kill_worker_local(local_cluster, store):
    run = launcher.launch(local_cluster, harness_job(), store=store, preflight=launcher.Preflight.SKIP)
    _kill_and_recover(run, store, "worker-1", "kill -9 non-chief worker (local)")


def test_kill_chief_over_ssh(ssh_cluster, ssh_options, store):
    run = launcher.launch(ssh_cluster, harness_job(), store=store, options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    _kill_and_recover(run, store, "chief-0", "kill -9 chief (ssh)")


def test_sshd_down_before_launch(ssh_hosts, ssh_options, client_key, python_path, tmp_path, store):
    down = sshd.make_host(tmp_path / "sshd4", "127.0.0.4", client_key.parent / "authorized_keys")
    with open(ssh_options.known_hosts, "a") as f:
        f.write(sshd.known_hosts_line(down))
    down.stop()
    from tests.conftest import ssh_task
    from backend.config.spec import cluster_from_dict
    cluster = cluster_from_dict({"tasks": [
        ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
        ssh_task(down, "worker", sshd.free_port(), client_key, python_path, tmp_path / "h4")]})
    started = time.time()
    with pytest.raises(ConsoleError) as err:
        launcher.launch(cluster, harness_job(), store=store, options=ssh_options, run_id="down-1")
    assert "127.0.0.4" in str(err.value) and str(err.value).rstrip().endswith("again."), err.value
    assert store.list() == [] and not (tmp_path / "h2" / "runs" / "down-1").exists()
    assert not [line for line in ps() if "down-1" in line]
    record("sshd down on one host before launch", refused_after_s=time.time() - started,
           error=str(err.value)[:160])


def test_kill_the_cli_training_goes_on(local_cluster, store, tmp_path):
    from backend.watch.metrics import MetricsStore
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster_to_dict(local_cluster)))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job_to_dict(harness_job())))
    cli = subprocess.Popen([sys.executable, "-m", "backend", "--runs", str(store.root), "launch",
                            str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "cli-1",
                            "--wait", "600"], cwd=detached.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Through the listing, as the console reads it: the run's folder is made a moment before its
    # record, and a load in between says "no run" (a race the previous form of this line lost).
    wait_for(lambda: any(s.run_id == "cli-1" and s.phase == "running" for s in store.list()), 120, "launch")
    run = launcher.attach("cli-1", store=store)
    wait_for(lambda: any(r["step"] >= 20 for r in metrics(run)), 150, "training")
    cli.send_signal(signal.SIGKILL)
    cli.wait(timeout=10)
    killed_at = max(r["step"] for r in metrics(run))
    # A new process attaches: the keeper and the tasks outlived the CLI.
    again = launcher.attach("cli-1", store=store)
    assert detached.keeper_pid(again.local_dir) and [s.state for s in again.status()] == ["running"] * 2
    seen = MetricsStore()
    monitor = again.monitor(seen).start()
    try:
        state = wait_phase(store, "cli-1", ("finished", "failed", "stopped"), 240)
        wait_for(lambda: "worker-1" in seen.tasks() and seen.series("worker-1").step.size
                 and seen.series("worker-1").step[-1] == TOTAL, 60, "the monitor to see the last step")
    finally:
        monitor.stop()
    assert state.phase == "finished" and len(state.attempts) == 1, state
    for task in ("worker-0", "worker-1"):
        assert list(seen.series(task).step) == expected_steps([0]), task
    record("kill the launching CLI", cli_killed_at_step=killed_at, restarts=0,
           steps_seen_once=len(expected_steps([0])), training_went_on=True)
    assert_nothing_left(run, store)


# Fails after launch's start check (START_CHECK_S), so the keeper, not launch, sees it; a job
# that fails sooner is refused by launch itself (the import test below).
FAILING_AT_START = f'''
import time
import tensorflow as tf

def build_model():
    time.sleep({hosts_engine.START_CHECK_S + 1})
    raise RuntimeError("boom: this job cannot build its model")

def make_dataset(ctx, batch_size, seed):
    return tf.data.Dataset.range(1)

def loss_fn(y, p):
    return tf.square(y - p)

def make_optimizer():
    return None
'''


def test_failing_job_ends_failed_with_its_traceback(local_cluster, store, tmp_path):
    module = tmp_path / "failing_job.py"
    module.write_text(FAILING_AT_START)
    started = time.time()
    run = launcher.launch(local_cluster, harness_job(str(module), max_restarts=1, backoff_s=0.5),
                          store=store, preflight=launcher.Preflight.SKIP)
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 240)
    assert state.phase == "failed" and len(state.attempts) == 2, state.attempts   # one restart, then no more
    assert all("boom" in a.reason or "failed to start" in a.reason for a in state.attempts), state.attempts
    out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run.run_id],
                         capture_output=True, text=True, cwd=detached.REPO_ROOT).stdout
    assert "Traceback (most recent call last)" in out and "RuntimeError: boom" in out, out
    assert out.count("attempt ") >= 2, out
    record("job raising at start (max_restarts=1)", failed_after_s=time.time() - started,
           attempts=len(state.attempts))
    assert_nothing_left(run, store)


def test_job_raising_at_import_is_refused_by_launch(local_cluster, store, tmp_path):
    module = tmp_path / "bad_import.py"
    module.write_text("raise ImportError('no such thing: this job cannot import')\n")
    with pytest.raises(ConsoleError, match="no such thing"):
        launcher.launch(local_cluster, harness_job(str(module)), store=store, run_id="imp-1",
                        preflight=launcher.Preflight.SKIP)
    state = store.load("imp-1")
    assert state.phase == "failed" and len(state.attempts) == 1
    assert detached.keeper_pid(store.path("imp-1")) is None
    assert_nothing_left(launcher.attach("imp-1", store=store), store)


def test_a_hung_worker_is_named_and_the_run_recovers(local_cluster, store):
    """A worker frozen mid-run (SIGSTOP: its sockets stay open, it never answers): its peer gives
    up on TensorFlow's heartbeats, and every place that shows why the attempt ended names the hung
    worker (the reason, `status`, the Monitor's attempts table, the alert), not the peer that exited."""
    from console.monitor_view import attempt_rows
    from tests.webhook import Receiver
    receiver, group = Receiver(), None
    try:
        run = launcher.launch(local_cluster, harness_job(alerts={"webhook": receiver.url, "format": "json"}),
                              store=store, preflight=launcher.Preflight.SKIP)
        wait_for(lambda: _past_first_checkpoint(run), 150, "training past the first checkpoint")
        group, frozen = freeze_task(run, "worker-1")
        state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 240)
        keeper_log = (run.local_dir / detached.KEEPER_LOG).read_text()
        assert state.phase == "finished" and len(state.attempts) == 2, (state.attempts, keeper_log)
        reason = state.attempts[0].reason
        assert reason.startswith("worker-1 hung: stopped sending heartbeats"), reason
        assert "worker-0 exited(1)" not in reason, reason
        out = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run.run_id],
                             capture_output=True, text=True, cwd=detached.REPO_ROOT).stdout
        assert f"ended: {reason}" in out, out
        assert attempt_rows(state)[0]["ended"] == reason
        alerts = receiver.wait(2)
        restarted = [b for b in alerts if b["event"] == "restarted"]
        assert restarted and "worker-1 hung" in restarted[0]["text"], alerts
        record("SIGSTOP non-chief worker (local)", detect_s=state.attempts[0].ended - frozen,
               restart_issued_s=state.attempts[1].started - frozen,
               stop_and_backoff_s=_between(keeper_log, "attempt 1 failed", "starting attempt 2"),
               resumed_from=state.attempts[1].resume_step)
        assert_nothing_left(run, store)   # the stopped group too: the stop must KILL or CONT it
    finally:
        receiver.close()
        if group is not None:
            signal_group(group, signal.SIGKILL)   # only after the checks: a failed one leaves none stopped


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _between(keeper_log: str, first: str, then: str) -> float | None:
    """Seconds between the keeper's log lines containing ``first`` and ``then`` (HH:MM:SS)."""
    stamps = {}
    for line in keeper_log.splitlines():
        for key in (first, then):
            if key in line and key not in stamps:
                h, m, s = (int(x) for x in line[:8].split(":"))
                stamps[key] = h * 3600 + m * 60 + s
    return stamps[then] - stamps[first] if len(stamps) == 2 else None
