"""Processes that try to escape a stop (issue 35): a daemon a job starts with `setsid`, a child left
in the task's group after its main process was killed (the run already recorded failed), and every
process of a run whose run folder on the hosts was removed before the stop. Each test runs
`python -m backend stop` as a user does and checks with /proc that nothing the run started is left.

The tests find the run's processes by a token of their own in the job's env (every process of the
job inherits it, `setsid` or not), not by anything the console marks: the check does not trust the
code it checks."""
from __future__ import annotations

import os
import shutil
import signal
import uuid

import pytest

from backend.config.spec import cluster_from_dict, job_from_dict
from backend.hosts.ssh import SSHOptions
from backend.runs import launcher
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import wait_for
from tests.integration.test_cli import ROOT, cli
from tests.integration.test_cli_ssh import flags, ssh_files  # noqa: F401 (fixture)

DAEMON = ("import subprocess, time\n"
          "subprocess.Popen(['setsid', 'sleep', '600'])\n"   # a data server's habit: its own session
          "print('up', flush=True)\n"
          "time.sleep(600)\n")
# A child in the task's group; then the main process dies by KILL once the test says so (after the
# launch's start-up check), as an out-of-memory kill would.
MAIN_KILLED = ("import os, subprocess, sys, time\n"
               "subprocess.Popen(['sleep', '600'])\n"
               "print('up', flush=True)\n"
               "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
               "os.kill(os.getpid(), 9)\n")
SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"


def carrying(token: str) -> dict[int, str]:
    """Live processes whose environment holds TOKEN=<token>: pid -> command line."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if f"TOKEN={token}".encode() in env:
            found[int(entry)] = argv
    return found


@pytest.fixture
def token():
    """The job's own mark; whatever carries it is ended after the test, pass or fail."""
    value = uuid.uuid4().hex
    yield value
    for pid in carrying(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _job(python: str, script: str, token: str, *args: str):
    return job_from_dict({"kind": "command", "command": [python, "-c", script, *args], "env": {"TOKEN": token}})


def _ssh_launch(files, python: str, script: str, token: str):
    import yaml
    options = SSHOptions(ssh_config=str(files / "ssh_config"), known_hosts=str(files / "known_hosts"))
    cluster = cluster_from_dict(yaml.safe_load((files / "cluster.yaml").read_text()))
    return launcher.launch(cluster, _job(python, script, token), store=RunStore(files / "runs"),
                           options=options, preflight=launcher.Preflight.SKIP)


def _sleeps(token: str) -> int:
    """The job's daemons (each a `sleep 600`), and not the `sleep 0.1` of a job's own polling
    loop, which is there most of the time: counted too, a full run once never saw just one."""
    return sum(argv == "sleep 600" for argv in carrying(token).values())


def test_a_setsid_daemon_does_not_outlive_the_stop(ssh_files, python_path, token):  # noqa: F811
    run = _ssh_launch(ssh_files, python_path, DAEMON, token)
    wait_for(lambda: _sleeps(token) == 2, 30, "each task's daemon")
    out = cli(*flags(ssh_files), "stop", run.run_id, runs=ssh_files / "runs")
    assert f"stopped {run.run_id}: no process left on any host" in out.stdout, out.stdout + out.stderr
    assert carrying(token) == {}, "left after the stop"


def test_a_child_left_by_a_killed_main_process_is_stopped(tmp_path, python_path, token):
    local = {"role": "worker", "host": "127.0.0.1", "transport": "local", "python": python_path,
             "workdir": str(tmp_path / "host")}
    cluster = cluster_from_dict({"tasks": [{**local, "tf_port": sshd.free_port()} for _ in range(2)]})
    flag = tmp_path / "die"
    run = launcher.launch(cluster, _job(python_path, MAIN_KILLED, token, str(flag)),
                          store=RunStore(tmp_path / "runs"), preflight=launcher.Preflight.SKIP)
    wait_for(lambda: _sleeps(token) == 2, 30, "each task's child")
    flag.touch()
    wait_for(lambda: "failed" in cli("status", run.run_id, runs=tmp_path / "runs").stdout.splitlines()[0],
             30, "the run recorded failed")
    assert _sleeps(token) == 2, "the children should still live here"
    out = cli("stop", run.run_id, runs=tmp_path / "runs")
    assert carrying(token) == {}, "left after the stop: " + out.stdout
    assert f"run {run.run_id} is already failed" in out.stdout, out.stdout
    assert "stopped what it left" in out.stdout and "worker-0" in out.stdout, out.stdout
    again = cli("stop", run.run_id, runs=tmp_path / "runs").stdout   # checked again: nothing now
    assert f"run {run.run_id} is already failed: no process left on any host" in again, again
    assert "failed" in cli("status", run.run_id, runs=tmp_path / "runs").stdout.splitlines()[0]


def test_a_removed_run_folder_still_stops_every_process(ssh_files, python_path, token):  # noqa: F811
    run = _ssh_launch(ssh_files, python_path, SLEEPER, token)
    wait_for(lambda: len(carrying(token)) == 4, 30, "both supervisors and both tasks")
    for t in run.state.tasks:   # a cleanup script, on each host
        shutil.rmtree(t.remote_run_dir)
    out = cli(*flags(ssh_files), "stop", run.run_id, runs=ssh_files / "runs")
    assert carrying(token) == {}, "left after the stop: " + out.stdout
    assert f"stopped {run.run_id}: no process left on any host" in out.stdout, out.stdout + out.stderr
    assert not any(os.path.exists(t.remote_run_dir) for t in run.state.tasks), "stop made the folder again"


def test_nothing_else_of_this_user_is_signalled(tmp_path, python_path, token):
    """Another run's daemon on the same host, with the same task name (a mark that differs only
    by its run folder), lives on through the stop."""
    bystander = uuid.uuid4().hex
    local = {"role": "worker", "host": "127.0.0.1", "transport": "local", "python": python_path,
             "tf_port": sshd.free_port(), "workdir": str(tmp_path / "host")}
    cluster = cluster_from_dict({"tasks": [local]})
    store = RunStore(tmp_path / "runs")
    ours = launcher.launch(cluster, _job(python_path, DAEMON, token), store=store,
                           preflight=launcher.Preflight.SKIP)
    other = launcher.launch(cluster, _job(python_path, DAEMON, bystander), store=store,
                            preflight=launcher.Preflight.SKIP)
    try:
        wait_for(lambda: _sleeps(token) == 1 and _sleeps(bystander) == 1, 30, "both daemons")
        before = carrying(bystander)
        cli("stop", ours.run_id, runs=tmp_path / "runs")
        assert carrying(token) == {}
        assert carrying(bystander) == before, "the other run's processes were signalled"
    finally:
        cli("stop", other.run_id, runs=tmp_path / "runs", check=False)
        for pid in carrying(bystander):
            os.kill(pid, signal.SIGKILL)



def test_a_job_that_stops_its_own_run_is_not_cut_off(tmp_path, python_path, token):
    """The stop spares itself and what it runs under: it finishes and says so, the daemon goes,
    and the job's shell ends once its stop has returned."""
    flag, said = tmp_path / "go", tmp_path / "said.txt"
    script = ("setsid sleep 600 & while [ ! -e \"$1\" ]; do sleep 0.1; done; cd \"$3\" && "
              "\"$4\" -m backend --runs \"$2\" stop \"$TFCONSOLE_RUN_ID\" > \"$5\" 2>&1")
    job = job_from_dict({"kind": "command", "env": {"TOKEN": token},
                         "command": ["sh", "-c", script, "sh", str(flag), str(tmp_path / "runs"),
                                     str(ROOT), python_path, str(said)]})
    cluster = cluster_from_dict({"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                                            "python": python_path, "tf_port": sshd.free_port(),
                                            "workdir": str(tmp_path / "host")}]})
    run = launcher.launch(cluster, job, store=RunStore(tmp_path / "runs"), preflight=launcher.Preflight.SKIP)
    wait_for(lambda: _sleeps(token) == 1, 30, "the job's daemon")
    flag.touch()
    wait_for(lambda: carrying(token) == {}, 60, "the job and its stop to end")
    assert f"stopped {run.run_id}: no process left on any host" in said.read_text(), said.read_text()
