"""The command line against real sshd: --ssh-config and --known-hosts, preflight, trust-host,
launch --wait, runs, logs and logs --follow, as a user runs them (`python -m backend` subprocesses)."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
import yaml

from rig import sshd
from tests.conftest import HOME, ROOT, ps, wait_for
from tests.integration.test_cli import cli


@pytest.fixture
def ssh_files(tmp_path, ssh_hosts, client_key, python_path, user):
    """A cluster file naming hosts by address only, and the ssh_config and known_hosts that the
    --ssh-config / --known-hosts flags point at (Port, User and IdentityFile per host)."""
    config = "".join(f"Host {h.address}\n  Port {h.port}\n  User {user}\n  IdentityFile {client_key}\n"
                     for h in ssh_hosts)
    (tmp_path / "ssh_config").write_text(config)
    (tmp_path / "known_hosts").write_text("".join(sshd.known_hosts_line(h) for h in ssh_hosts))
    tasks = [{"role": role, "host": h.address, "tf_port": sshd.free_port(), "python": python_path,
              "workdir": str(tmp_path / h.address)} for role, h in zip(("chief", "worker"), ssh_hosts)]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"tasks": tasks}))
    return tmp_path


def flags(files, known_hosts: str = "known_hosts") -> list[str]:
    return ["--ssh-config", str(files / "ssh_config"), "--known-hosts", str(files / known_hosts)]


def command_job(files, *args: str) -> str:
    job = {"kind": "command", "command": [str(ROOT / "examples" / "tf_config_script.py"), *args]}
    (files / "job.yaml").write_text(yaml.safe_dump(job))
    return str(files / "job.yaml")


def test_preflight_reads_the_flags(ssh_files):
    runs = ssh_files / "runs"
    out = cli(*flags(ssh_files), "preflight", str(ssh_files / "cluster.yaml"), runs=runs).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[:2] for r in rows] == [["chief-0", "127.0.0.2"], ["worker-0", "127.0.0.3"]]
    assert all(r[2] == "ok" for r in rows), out
    # The same cluster with an empty known_hosts: refused, the unknown key named.
    (ssh_files / "empty").write_text("")
    proc = cli(*flags(ssh_files, "empty"), "preflight", str(ssh_files / "cluster.yaml"), runs=runs, check=False)
    assert proc.returncode == 1 and "unknown host key" in proc.stdout, proc.stdout
    # Without --ssh-config the operator's ~/.ssh/config has no block for these addresses: port 22.
    proc = cli("--known-hosts", str(ssh_files / "known_hosts"), "preflight", str(ssh_files / "cluster.yaml"),
               runs=runs, check=False)
    assert proc.returncode == 1 and ":22" in proc.stdout, proc.stdout


def test_preflight_over_the_operators_aliases(operator_ssh, python_path, tmp_path):
    tasks = [{"role": role, "host": alias, "tf_port": sshd.free_port(), "python": python_path}
             for role, alias in (("chief", "h2"), ("worker", "h3"))]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"tasks": tasks}))
    out = cli("preflight", str(tmp_path / "cluster.yaml"), runs=tmp_path / "runs").stdout   # no flags
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [["chief-0", "h2", "ok"], ["worker-0", "h3", "ok"]]


@pytest.fixture
def untrusted(tmp_path, client_key):
    host = sshd.make_host(tmp_path, "127.0.0.6", client_key.parent / "authorized_keys", home=str(HOME))
    yield host
    host.stop()


def test_trust_host_shows_then_trusts_only_the_checked_fingerprint(untrusted, tmp_path):
    known, runs = tmp_path / "kh", tmp_path / "runs"
    expected = subprocess.run(["ssh-keygen", "-lf", str(untrusted.folder / "host_ed25519.pub")],
                              capture_output=True, text=True, check=True).stdout.split()[1]
    args = ("--known-hosts", str(known), "trust-host", untrusted.address, "--port", str(untrusted.port))
    shown = cli(*args, runs=runs, check=False)
    assert shown.returncode == 1 and expected in shown.stdout and not known.exists()
    wrong = cli(*args, "--fingerprint", "SHA256:not-the-one", runs=runs, check=False)
    assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1 and not known.exists()
    assert "Traceback" not in wrong.stderr
    done = cli(*args, "--fingerprint", expected, runs=runs)
    assert "trusted" in done.stdout
    assert known.read_text().split()[:2] == [f"[{untrusted.address}]:{untrusted.port}", "ssh-ed25519"]


@pytest.mark.slow
def test_launch_wait_then_runs_and_logs(ssh_files):
    runs = ssh_files / "runs"
    job = command_job(ssh_files, "--steps", "20")
    out = cli(*flags(ssh_files), "launch", str(ssh_files / "cluster.yaml"), job, "--wait", "240", runs=runs).stdout
    run_id, verdict = out.splitlines()
    assert verdict == f"run {run_id}: finished"
    listed = [line.split() for line in cli("runs", runs=runs).stdout.splitlines()]
    assert [row[:2] for row in listed] == [[run_id, "finished"]]
    logs = cli(*flags(ssh_files), "logs", run_id, "--task", "worker-0", runs=runs).stdout
    assert "step 19" in logs or "step 20" in logs, logs[-2000:]


@pytest.mark.slow
def test_logs_follow_prints_new_lines_and_leaves_nothing_behind(ssh_files):
    runs = ssh_files / "runs"
    job = command_job(ssh_files, "--steps", "100000", "--sleep", "0.05")
    run_id = cli(*flags(ssh_files), "launch", str(ssh_files / "cluster.yaml"), job, runs=runs).stdout.strip()
    follow = subprocess.Popen([sys.executable, "-m", "backend", "--runs", str(runs), *flags(ssh_files),
                               "logs", run_id, "--task", "worker-0", "--follow"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=_ctrl_c_as_at_a_terminal)
    # Read every line as a terminal would: a pipe nobody drains fills up, and the CLI would then
    # hang on its next print (and on its exit's flush) however it is interrupted.
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(follow.stdout), daemon=True)
    reader.start()
    try:
        # lines keep coming while it trains: steps 2 and 3 at least
        wait_for(lambda: any("step 3 " in line for line in list(seen)), 180, "followed lines up to step 3")
        assert any("step 2 " in line for line in seen)
        # The check below can see the remote reader (it may start after the first lines came).
        wait_for(lambda: _remote_tails(ssh_files), 30, "the remote `hostctl follow`")
        follow.send_signal(signal.SIGINT)   # Ctrl-C, as a user ends it
        assert follow.wait(30) == 130       # README: 130 means interrupted
        wait_for(lambda: not _remote_tails(ssh_files), 30, "the remote `hostctl follow` to end")
    finally:
        follow.kill()
        assert "no process left" in cli(*flags(ssh_files), "stop", run_id, runs=runs).stdout


def _ctrl_c_as_at_a_terminal() -> None:
    """SIGINT at its default in the CLI, as in a terminal. A suite started in the background by a
    non-interactive shell (`make test &`, some CI runners) inherits SIGINT ignored, and so would
    the CLI: Python then installs no KeyboardInterrupt handler, and Ctrl-C could not end it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _remote_tails(workdirs) -> list[str]:
    """`hostctl.py follow` processes reading a log under ``workdirs`` (the hosts are this machine)."""
    return [line for line in ps() if "lib hostctl follow" in line and str(workdirs) in line]


def test_preflight_refuses_a_host_with_another_tensorflow(ssh_files, python_path):
    """A stand-in TensorFlow 2.0.0 install (package and its pip metadata) on the worker's Python
    path: a second real TensorFlow is a 500 MB download, and the check reads only what is installed."""
    stub = ssh_files / "old_tf"
    for package, version in (("tensorflow", "2.0.0"), ("keras", "2.3.1")):
        (stub / package).mkdir(parents=True)
        (stub / package / "__init__.py").write_text(f"__version__ = {version!r}\n")
        (stub / f"{package}-{version}.dist-info").mkdir()
        (stub / f"{package}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    python = ssh_files / "python-with-old-tf"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={stub} exec {python_path} \"$@\"\n")
    python.chmod(0o755)
    cluster = yaml.safe_load((ssh_files / "cluster.yaml").read_text())
    # A third task, on the worker's host, with the other TensorFlow: two against one.
    cluster["tasks"].append({**cluster["tasks"][1], "python": str(python), "tf_port": sshd.free_port()})
    (ssh_files / "mixed.yaml").write_text(yaml.safe_dump(cluster))
    proc = cli(*flags(ssh_files), "preflight", str(ssh_files / "mixed.yaml"), runs=ssh_files / "runs", check=False)
    assert proc.returncode == 1, proc.stdout
    rows = proc.stdout.splitlines()[1:]
    assert ["FAIL" in row for row in rows] == [False, False, True], rows
    assert "2.0.0" in rows[2] and "same version" in rows[2], rows[2]


@pytest.mark.slow
def test_gpus_become_cuda_visible_devices(ssh_files, python_path):
    """Each task sees only its own GPU indices; an empty list hides every GPU. (This machine has no
    GPU: the test checks what each task is told, which is all the launcher controls.)"""
    from backend.hosts.ssh import SSHOptions
    from backend.runs.launcher import Preflight, launch
    from backend.runs.store import RunStore
    from backend.config.spec import cluster_from_dict, job_from_dict
    flag = ssh_files / "go"
    code = ("import os, sys, time\nprint('CVD=%r' % os.environ.get('CUDA_VISIBLE_DEVICES'), flush=True)\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n")
    tasks = yaml.safe_load((ssh_files / "cluster.yaml").read_text())["tasks"]
    tasks[0]["gpus"], tasks[1]["gpus"] = [1, 0], []
    options = SSHOptions(ssh_config=str(ssh_files / "ssh_config"), known_hosts=str(ssh_files / "known_hosts"))
    run = launch(cluster_from_dict({"tasks": tasks}),
                 job_from_dict({"kind": "command", "command": [python_path, "-c", code, str(flag)]}),
                 store=RunStore(ssh_files / "runs"), options=options, preflight=Preflight.SKIP)
    try:
        logs = wait_for(lambda: (tails := [run.log_tail(t.name) for t in run.state.tasks]) and
                        all("CVD=" in tail for tail in tails) and tails, 60, "each task's line")
        assert "CVD='1,0'" in logs[0] and "CVD=''" in logs[1], logs
    finally:
        flag.touch()
    assert [s.exit_code for s in run.wait(timeout=60)] == [0, 0]
