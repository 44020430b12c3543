"""Many tasks (issue 37): a 32-task light job on four real sshd hosts, eight tasks each, run as a
user runs it (`python -m backend` subprocesses): preflight probes each host once, launch records
every host's versions at once, status shows every task, and stop returns with nothing of the run
left (checked with ps), the logs copied here after it. Speed is bench/many_tasks.py's, not this
test's: the stop's bound here is only that it returns."""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from types import SimpleNamespace

import pytest
import yaml

from backend.config.spec import cluster_from_dict
from backend.hosts.pool import Pool
from backend.hosts.preflight import run_preflight
from backend.hosts.ssh import SSHOptions
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import HOME, processes_of, ssh_task, wait_for
from tests.integration.test_cli import cli

HOSTS, PER_HOST = 4, 8
JOB = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
STOP_BOUND_S = 120   # a stop that waited on something per task would still return; one that hung would not


@pytest.fixture(scope="module")
def four_hosts(tmp_path_factory, client_key):
    root = tmp_path_factory.mktemp("many_hosts")
    hosts = [sshd.make_host(root, f"127.0.0.{n}", client_key.parent / "authorized_keys", home=str(HOME))
             for n in range(12, 12 + HOSTS)]
    yield hosts
    for h in hosts:
        h.stop()


@pytest.fixture
def files(tmp_path, four_hosts, client_key, python_path):
    token = uuid.uuid4().hex
    tasks = [ssh_task(h, "worker", sshd.free_port(), client_key, python_path, tmp_path / "work")
             for h in four_hosts for _ in range(PER_HOST)]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"tasks": tasks}))
    job = {"kind": "command", "command": [python_path, "-c", JOB], "env": {"TOKEN": token}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "known_hosts").write_text("".join(sshd.known_hosts_line(h) for h in four_hosts))
    yield tmp_path, token
    for pid in _carrying(token):   # pass or fail, nothing of the job outlives the test
        os.kill(pid, signal.SIGKILL)


def _carrying(token: str) -> list[int]:
    """Live processes whose environment holds TOKEN=<token>: what the job started, and only that."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"TOKEN={token}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _flags(folder) -> list[str]:
    return ["--known-hosts", str(folder / "known_hosts"), "--ssh-config", str(folder / "no_ssh_config")]


class _Counting(Pool):
    """A pool that counts the preflight probes it runs (``python -c PROBE --peers ...``; the
    login's cost is measured by a command of its own, ``sh -c``, not counted here)."""

    def __init__(self, options: SSHOptions) -> None:
        super().__init__(options)
        self.probes: list[list[str]] = []

    def transport(self, task):
        real, probes = super().transport(task), self.probes

        class Counted:
            def __getattr__(self, name):
                return getattr(real, name)

            def run(self, argv, **kw):
                if "-c" in argv and "--peers" in argv:
                    probes.append(list(argv))
                return real.run(argv, **kw)
        return Counted()


def test_preflight_probes_each_host_once_and_dials_each_peer_host_once(files):
    folder, _ = files
    cluster = cluster_from_dict(yaml.safe_load((folder / "cluster.yaml").read_text()))
    options = SSHOptions(known_hosts=str(folder / "known_hosts"), ssh_config=str(folder / "no_ssh_config"),
                         allow_agent=False, look_for_keys=False)
    with _Counting(options) as pool:
        reports = run_preflight(cluster, pool)
    assert [r.task for r in reports] == [f"worker-{i}" for i in range(HOSTS * PER_HOST)]
    assert all(r.ok for r in reports), [r.problems() for r in reports if not r.ok]
    assert {r.checks["peers"]["peers"] for r in reports} == {HOSTS * PER_HOST - 1}   # every peer task covered
    assert len(pool.probes) == HOSTS, "one probe per host, not per task"
    for argv in pool.probes:
        assert argv.count("--port") == PER_HOST   # each task's port and folder checked there
        assert len(json.loads(argv[argv.index("--peers") + 1])) == HOSTS   # a dial per host, not per task


def test_thirty_two_tasks_launch_show_and_stop_with_nothing_left(files):
    folder, token = files
    runs = folder / "runs"
    launched = cli(*_flags(folder), "launch", str(folder / "cluster.yaml"), str(folder / "job.yaml"), runs=runs)
    run_id = launched.stdout.split()[-1]
    state = RunStore(runs).load(run_id)
    try:
        # Versions are recorded at launch, from preflight: `runs show` lists every task's at once.
        shown = json.loads(cli(*_flags(folder), "runs", "show", run_id, "--json", runs=runs).stdout)
        assert sorted(shown["hosts"]) == sorted(t.name for t in state.tasks)
        assert all(v["python"] == f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
                   and v["tensorflow"] for v in shown["hosts"].values()), shown["hosts"]
        status = cli(*_flags(folder), "status", run_id, runs=runs).stdout
        for t in state.tasks:
            assert any(line.split()[:1] == [t.name] and "running" in line for line in status.splitlines()), status
        wait_for(lambda: len(_carrying(token)) == 2 * HOSTS * PER_HOST, 60, "every task and its supervisor")
        began = time.monotonic()
        stopped = cli(*_flags(folder), "stop", run_id, runs=runs)
        took = time.monotonic() - began
    except BaseException:
        cli(*_flags(folder), "stop", run_id, runs=runs, check=False)
        raise
    assert f"stopped {run_id}: no process left on any host" in stopped.stdout, stopped.stdout + stopped.stderr
    assert took < STOP_BOUND_S, f"stop took {took:.0f} s"
    assert _carrying(token) == [], "left after the stop"
    run = RunStore(runs).load(run_id)
    assert run.phase == "stopped"
    assert processes_of(SimpleNamespace(state=run, run_id=run_id)) == []   # ps: nothing names the run
    # The logs come here after the stop returned, every task's.
    logs = runs / run_id / "logs"
    wait_for(lambda: all((logs / f"{t.name}.log").exists() and "up" in (logs / f"{t.name}.log").read_text()
                         for t in run.tasks), 120, "every task's log copied here")
