"""A host whose sshd has NO SFTP subsystem (some sites disable it; paramiko's open_sftp then fails
with "Channel closed"). The console needs none: files and answers travel as hostctl commands, so
launch, status, logs, save now, the keeper's restart and the command line's stop all work there,
and nothing prints a traceback."""
from __future__ import annotations

import subprocess
import sys

import paramiko
import pytest
import yaml

from backend import checkpoints
from backend.runs import detached
from backend.runs import launcher
from backend.hosts import remote
from backend.hosts.ssh import SSHTransport
from backend.config.spec import cluster_from_dict
from rig import sshd
from tests import conftest
from tests.conftest import alias_task, ssh_task
from tests.faults.conftest import (PARAMS, assert_nothing_left, harness_job, kill_task, metrics, record,
                                   wait_for, wait_phase)

ROOT = conftest.ROOT


@pytest.fixture(scope="module")
def no_sftp_host(tmp_path_factory, client_key, operator_ssh) -> sshd.SSHHost:
    """A real sshd on 127.0.0.6 with no ``Subsystem sftp`` line; alias ``h6`` in ~/.ssh/config,
    its key in ~/.ssh/known_hosts."""
    host = sshd.make_host(tmp_path_factory.mktemp("nosftp"), "127.0.0.6", client_key.parent / "authorized_keys",
                          home=str(conftest.HOME), sftp=False)
    operator_ssh.add("h6", host)
    yield host
    operator_ssh.remove("h6")
    host.stop()


@pytest.fixture
def no_sftp(no_sftp_host) -> str:
    return "h6"


def test_the_host_really_has_no_sftp(no_sftp):
    t = SSHTransport(no_sftp)
    assert t.run(["echo", "shell works"]).stdout == "shell works\n"
    with pytest.raises(paramiko.SSHException):
        t._connect().open_sftp()
    t.close()


def cli(*args: str, runs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_command_job_status_logs_and_cli_stop(no_sftp, python_path, tmp_path):
    cluster = {"tasks": [alias_task(no_sftp, "worker", python_path, tmp_path / "h6"),
                         alias_task(no_sftp, "worker", python_path, tmp_path / "h6")]}
    job = {"kind": "command", "command": [python_path, "-u", "-c",
                                          "import time\nwhile True: print('tick'); time.sleep(0.2)"]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    runs = tmp_path / "runs"
    launched = cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"),
                   "--run-id", "nosftp-cmd", runs=runs)
    assert launched.returncode == 0, launched.stderr
    status = cli("status", "nosftp-cmd", runs=runs)
    assert status.returncode == 0 and status.stdout.count("running") >= 2, status
    wait_for(lambda: "tick" in cli("logs", "nosftp-cmd", "--task", "worker-1", runs=runs).stdout, 60,
             "worker-1's log through the CLI")
    stopped = cli("stop", "nosftp-cmd", "--grace", "3", runs=runs)
    for proc in (launched, status, stopped):
        assert "Traceback" not in proc.stdout + proc.stderr, proc
    assert stopped.returncode == 0, stopped.stderr
    from backend.runs.store import RunStore
    run = launcher.attach("nosftp-cmd", store=RunStore(runs))
    assert run.state.phase == "stopped"
    assert_nothing_left(run, RunStore(runs))


@pytest.mark.slow
def test_harness_run_with_its_chief_there(no_sftp_host, ssh_hosts, client_key, python_path, tmp_path, store):
    """Chief on the SFTP-less host: save now, checkpoints, the keeper's progress reads and its
    restart after a worker is killed, the logs copied home when it ends. Tasks are named by
    address (workers dial TF_CONFIG's hosts), trusted through ~/.ssh/known_hosts."""
    cluster = cluster_from_dict({"tasks": [
        ssh_task(no_sftp_host, "chief", sshd.free_port(), client_key, python_path, tmp_path / "h6"),
        ssh_task(ssh_hosts[0], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h2")]})
    # The first attempt must outlast the save, the listing, the fetch and the kill: 2.4 s from the
    # first checkpoint (step 45) to the kill (step 105) alone at load average 12. pace_s (0.03 s
    # a step) makes steps 45-800 last at least 22.6 s on any machine; load only adds to it. The
    # second attempt needs no length of its own. 3000 steps took 157 s after the restart; this 40 s.
    run = launcher.launch(cluster, harness_job(steps_per_epoch=800), store=store)   # preflight too
    wait_for(lambda: any(r["step"] > PARAMS["checkpoint_every"] for r in metrics(run)), 150,
             "training past the first checkpoint")
    saved = checkpoints.save_now(run, wait_s=120)
    listed = checkpoints.list_checkpoints(run)   # the newest five: later saves may prune this one
    assert saved <= listed[-1]["step"], (saved, listed)
    index = tmp_path / "ckpt.index"
    remote.fetch_file(run.remote("chief-0"), f"checkpoints/ckpt-{listed[-1]['step']}.index", index)
    assert index.stat().st_size == listed[-1]["files"][f"ckpt-{listed[-1]['step']}.index"]
    kill_task(run, "worker-0")
    state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 300)
    assert state.phase == "finished" and len(state.attempts) == 2, state.attempts
    assert state.attempts[1].resume_step, state.attempts   # restarted from a checkpoint it listed
    keeper_log = (run.local_dir / detached.KEEPER_LOG).read_text()
    assert "Traceback" not in keeper_log and "Channel closed" not in keeper_log, keeper_log
    assert "step" in (run.local_dir / "logs" / "chief-0.log").read_text()   # mirrored home
    assert_nothing_left(run, store)
    record("host without SFTP", save_now_step=saved, attempts=len(state.attempts),
           resumed_from=state.attempts[1].resume_step)
