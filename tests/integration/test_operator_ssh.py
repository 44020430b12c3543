"""The operator's ~/.ssh/config, read with SSHOptions() defaults, against real sshd: aliases,
Port, User, IdentityFile and ProxyJump through the only way in (fixtures in tests/conftest.py)."""
from __future__ import annotations

import socket

import pytest

from backend.errors import HostError
from backend.hosts.ssh import SSHOptions, SSHTransport
from tests.conftest import HOME


def options_with(tmp_path, operator_ssh, text: str) -> SSHOptions:
    """Default options, but reading ``text`` as ~/.ssh/config (known_hosts stays the operator's)."""
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return SSHOptions(ssh_config=str(config), known_hosts=str(operator_ssh.known_hosts),
                      allow_agent=False, look_for_keys=False)


def test_alias_needs_nothing_but_the_operators_config(operator_ssh, user):
    for alias in ("h2", "h3"):
        t = SSHTransport(alias)   # no port, user, key or known_hosts given: ~/.ssh supplies them
        result = t.run(["sh", "-c", 'echo "$(id -un) $HOME $(pwd)"'])
        assert result.stdout.split() == [user, str(HOME), str(HOME)]
        t.close()


def test_identity_file_comes_from_the_config(operator_ssh, ssh_hosts, tmp_path):
    host = ssh_hosts[0]
    # The same alias without the IdentityFile line: the key has a name OpenSSH never guesses.
    bare = options_with(tmp_path, operator_ssh, f"Host h2\n  HostName {host.address}\n  Port {host.port}\n")
    with pytest.raises(HostError, match="(?i)authentication"):
        SSHTransport("h2", options=bare).run(["true"])
    keyed = options_with(tmp_path, operator_ssh, f"Host h2\n  HostName {host.address}\n  Port {host.port}\n"
                                                 f"  IdentityFile {operator_ssh.key}\n")
    assert SSHTransport("h2", options=keyed).run(["true"]).ok


def test_user_comes_from_the_config(operator_ssh, ssh_hosts, tmp_path):
    host = ssh_hosts[0]
    options = options_with(tmp_path, operator_ssh, f"Host h2\n  HostName {host.address}\n  Port {host.port}\n"
                                                   f"  User nobody-here\n  IdentityFile {operator_ssh.key}\n")
    with pytest.raises(HostError, match="nobody-here"):
        SSHTransport("h2", options=options).run(["true"])


def test_hidden_host_refuses_direct_connections(jump_host, operator_ssh, tmp_path):
    target = jump_host.target_sshd
    with pytest.raises(ConnectionRefusedError), socket.create_connection((target.address, target.port), 5):
        pass
    # The operator's own block for h5, minus ProxyJump: the product cannot get in either.
    direct = options_with(tmp_path, operator_ssh, f"Host h5\n  HostName {target.address}\n  Port {target.port}\n"
                                                  f"  IdentityFile {operator_ssh.key}\n")
    with pytest.raises(HostError, match="cannot connect"):
        SSHTransport("h5", options=direct).run(["true"])


def test_proxyjump_from_the_config_reaches_the_hidden_host(jump_host):
    t = SSHTransport(jump_host.target)   # ProxyJump h4, itself an alias, from ~/.ssh/config
    assert t.run(["echo", "jumped"]).stdout == "jumped\n"
    # The session really is on the hidden host: the address it was reached at is its own.
    assert t.run(["sh", "-c", "echo $SSH_CONNECTION"]).stdout.split()[2] == jump_host.target_sshd.address
    assert t.run(["cat"], stdin=b"through the jump host").stdout == "through the jump host"
    t.close()


@pytest.fixture
def agent_with_key(tmp_path, client_key, monkeypatch):
    """A real ssh-agent holding the test key; the key file itself is deleted once loaded."""
    import shutil
    import subprocess

    from tests.conftest import require
    require("ssh-agent and ssh-add (openssh-client)", bool(shutil.which("ssh-agent") and shutil.which("ssh-add")))
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        from rig.sshd import wait_for_path
        wait_for_path(sock)
        key = tmp_path / "only_in_agent"
        shutil.copyfile(client_key, key)
        key.chmod(0o600)
        env = {"SSH_AUTH_SOCK": str(sock), "PATH": "/usr/bin:/bin"}
        subprocess.run(["ssh-add", str(key)], env=env, check=True, capture_output=True)
        key.unlink()
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_keys_in_ssh_agent_work(agent_with_key, operator_ssh, ssh_hosts, tmp_path):
    host = ssh_hosts[0]
    text = f"Host h2\n  HostName {host.address}\n  Port {host.port}\n"   # no IdentityFile at all
    config = tmp_path / "agent_config"
    config.write_text(text)
    with_agent = SSHOptions(ssh_config=str(config), known_hosts=str(operator_ssh.known_hosts))
    assert SSHTransport("h2", options=with_agent).run(["echo", "agent"]).stdout == "agent\n"
    without = SSHOptions(ssh_config=str(config), known_hosts=str(operator_ssh.known_hosts), allow_agent=False)
    with pytest.raises(HostError, match="(?i)authentication"):
        SSHTransport("h2", options=without).run(["true"])
