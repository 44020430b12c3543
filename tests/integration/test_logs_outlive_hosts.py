"""Logs that outlive their hosts, over real sshd: while a two-host run streams, the console keeps a
copy of each task's log (the chief's through the watch agent, the other host's through
``LogCopier``); then the sshd of both hosts dies, and the finished tasks' logs still read the
same through ``Run.log_tail``, the Monitor's log panel and ``python -m backend logs``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from backend.runs import launcher
from backend.hosts.ssh import SSHOptions
from backend.runs.store import RunStore
from backend.config.spec import cluster_from_dict, job_from_dict
from console.live_run import LiveRun
from rig import sshd
from tests.conftest import processes_of, ssh_task, wait_for

SCRIPT = "import time\nfor i in range(40):\n    print('line', i, flush=True)\n    time.sleep(0.05)\nprint('ALL DONE')"


@pytest.mark.slow
def test_finished_logs_read_the_same_with_every_host_down(client_key, python_path, tmp_path):
    keys = client_key.parent / "authorized_keys"
    hosts = [sshd.make_host(tmp_path / f"sshd{i}", f"127.0.0.{i}", keys) for i in (6, 7)]
    try:
        known = tmp_path / "known_hosts"
        known.write_text("".join(sshd.known_hosts_line(h) for h in hosts))
        options = SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "none"),
                             allow_agent=False, look_for_keys=False, connect_timeout=3)
        cluster = cluster_from_dict({"tasks": [
            ssh_task(h, "worker", sshd.free_port(), client_key, python_path, tmp_path / f"home{i}")
            for i, h in enumerate(hosts)]})
        job = job_from_dict({"kind": "command", "command": [python_path, "-c", SCRIPT]})
        store = RunStore(tmp_path / "runs")
        run = launcher.launch(cluster, job, store=store, options=options, preflight=launcher.Preflight.SKIP)
        live = LiveRun(run)
        live.ensure_monitor()
        try:
            for task in ("worker-0", "worker-1"):
                wait_for(lambda: "ALL DONE" in live.log_lines(task), 120, f"{task}'s whole log here")
            seen = {task: run.log_tail(task) for task in ("worker-0", "worker-1")}   # hosts up
            assert live.copier is not None and live.copier.tasks == ["worker-1"]   # the other host
        finally:
            live.close()
        for host in hosts:
            host.kill_all()   # every sshd process of both hosts: nothing answers any more
        again = launcher.attach(run.run_id, store=store, options=options)
        for task in ("worker-0", "worker-1"):
            text = again.log_tail(task)
            assert "ALL DONE" in text and "line 39" in text, text[-500:]
            assert text.rstrip("\n").splitlines()[-41:] == seen[task].rstrip("\n").splitlines()[-41:]
        cli = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root),
                              "--known-hosts", str(known), "--ssh-config", str(tmp_path / "none"),
                              "logs", run.run_id], capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0 and cli.stdout.count("ALL DONE") == 2, cli.stdout[-800:] + cli.stderr
        wait_for(lambda: processes_of(run) == [], 30, "the finished tasks to be gone")
    finally:
        for host in hosts:
            host.stop()


def test_an_ended_run_is_not_watched_once_caught_up(local_cluster, tmp_path):
    """Monitor on a finished run: the watch agent brings the logs, then is stopped; they stay."""
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(local_cluster, job_from_dict({"kind": "command", "command": [sys.executable, "-c", SCRIPT]}),
                          store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: (run.settle(), not run.state.live)[1], 120, "the run to finish")
    live = LiveRun(launcher.attach(run.run_id, store=store))
    try:
        live.ensure_monitor()
        wait_for(lambda: "ALL DONE" in live.log_lines("worker-1"), 60, "the logs through the agent")
        wait_for(lambda: (live.refresh(force=True), not live.monitor.running)[1], 60, "the agent to be stopped")
        assert processes_of(run) == []   # no watch agent left polling an ended run
        assert "ALL DONE" in live.log_lines("worker-1") and live.monitor.logs("worker-0")
    finally:
        live.close()
