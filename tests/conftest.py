"""Shared fixtures. Real parts only; a part missing in CI (CI=true) fails the run."""
from __future__ import annotations

import getpass
import os
import shutil
import sys
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
