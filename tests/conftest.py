"""Shared fixtures. Real parts only; a part missing in CI (CI=true) fails the run."""
from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import sshd

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(what: str, present: bool) -> None:
    """Skip on a developer machine without ``what``; fail in CI, where it must be installed."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing; `make test` installs it")
    pytest.skip(f"{what} is not installed (run `make test` to install it)")


@pytest.fixture(scope="session")
def client_key(tmp_path_factory) -> Path:
    require("ssh-keygen (openssh-client)", bool(shutil.which("ssh-keygen")))
    folder = tmp_path_factory.mktemp("client")
    sshd.keygen(folder / "id_ed25519")
    (folder / "authorized_keys").write_text((folder / "id_ed25519.pub").read_text())
    return folder / "id_ed25519"


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory, client_key):
    """Two real sshd servers, on 127.0.0.2 and 127.0.0.3, each with its own host key."""
    require("sshd (openssh-server)", os.path.exists(sshd.SSHD))
    root = tmp_path_factory.mktemp("sshd")
    hosts = [sshd.make_host(root, f"127.0.0.{n}", client_key.parent / "authorized_keys")
             for n in (2, 3)]
    yield hosts
    for host in hosts:
        host.stop()


@pytest.fixture
def ssh_options(tmp_path, ssh_hosts):
    """Options whose known_hosts already trusts both test hosts (as after an operator's trust)."""
    from backend.hosts.ssh import SSHOptions
    known = tmp_path / "known_hosts"
    known.write_text("".join(sshd.known_hosts_line(h) for h in ssh_hosts))
    return SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "no_ssh_config"),
                      allow_agent=False, look_for_keys=False)


@pytest.fixture(scope="session")
def python_path() -> str:
    """The interpreter the test hosts use: this venv's, which has TensorFlow."""
    return sys.executable


@pytest.fixture(scope="session")
def user() -> str:
    return getpass.getuser()


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what`` after ``timeout``."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def ssh_task(host, role, port, client_key, python, workdir, **extra) -> dict:
    """One task on a test sshd host, as a spec dict."""
    return {"role": role, "host": host.address, "ssh_port": host.port, "tf_port": port,
            "identity_file": str(client_key), "python": python, "workdir": str(workdir), **extra}


def processes_of(run) -> list[str]:
    """Every live process of the run, from `ps`: by recorded process group or run id in argv."""
    groups = {t.pgid for t in run.state.tasks if t.pgid}
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    left = []
    for line in out.splitlines():
        pid, pgid, stat, args = line.split(None, 3)
        if stat.startswith("Z") or "ps -eo" in args:
            continue
        if int(pgid) in groups or run.run_id in args:
            left.append(line)
    return left


@pytest.fixture
def ssh_cluster(ssh_hosts, client_key, python_path, tmp_path):
    """A chief on 127.0.0.2 and a worker on 127.0.0.3, over real sshd."""
    from backend.spec import cluster_from_dict
    return cluster_from_dict({"tasks": [
        ssh_task(ssh_hosts[0], "chief", sshd.free_port(), client_key, python_path, tmp_path / "h2"),
        ssh_task(ssh_hosts[1], "worker", sshd.free_port(), client_key, python_path, tmp_path / "h3"),
    ]})


@pytest.fixture
def local_cluster(python_path, tmp_path):
    """Two workers on this machine through the local transport."""
    from backend.spec import cluster_from_dict
    return cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
         "python": python_path, "workdir": str(tmp_path / "local")} for _ in range(2)]})
