"""Trust that works for real configs, against real sshd: trust-host with an alias, a non-22 port
and a jump host; known_hosts with @cert-authority, @revoked, hashed and sk- lines; a changed key
replaced only by explicit choice. The CLI runs as a user runs it, with the operator's ~/.ssh."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import HostKeyError
from backend.hosts.known_hosts import blob_fingerprint
from backend.hosts.ssh import SSHOptions, SSHTransport
from rig import sshd

ROOT = Path(__file__).resolve().parents[2]
# A security-key host line (sk-ssh-ed25519@openssh.com), as OpenSSH writes it for a FIDO host key.
SK_LINE = ("[gpu9]:2222 sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29tAAAAIAAAAAAAAA"
           "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEc3NoOg== security key\n")


def cli(*args: str, known: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--known-hosts", str(known), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def fp(host: sshd.SSHHost) -> str:
    import base64
    return blob_fingerprint(base64.b64decode(host.host_key_pub.split()[1]))


def options(known: Path) -> SSHOptions:
    return SSHOptions(known_hosts=str(known), allow_agent=False, look_for_keys=False)


def test_trust_host_by_alias(operator_ssh, ssh_hosts, tmp_path):
    known = tmp_path / "known_hosts"
    shown = cli("trust-host", "h2", known=known)
    host = ssh_hosts[0]
    # HostName and Port come from ~/.ssh/config: the alias is dialled where ssh would dial it.
    assert shown.returncode == 1 and f"h2 ({host.address}:{host.port}) offers ssh-ed25519 {fp(host)}" in shown.stdout
    with pytest.raises(HostKeyError, match="unknown host key"):
        SSHTransport("h2", options=options(known)).run(["true"])
    done = cli("trust-host", "h2", "--fingerprint", fp(host), known=known)
    assert done.returncode == 0, done.stderr
    assert known.read_text().startswith(f"[{host.address}]:{host.port} ssh-ed25519 ")
    assert SSHTransport("h2", options=options(known)).run(["true"]).ok


def test_trust_host_behind_a_jump_host(jump_host, operator_ssh, tmp_path):
    known = tmp_path / "known_hosts"
    target = jump_host.target_sshd
    # The jump host is trusted; the hidden host is not yet.
    known.write_text("".join(ln for ln in operator_ssh.known_hosts.read_text().splitlines(keepends=True)
                             if not ln.startswith(f"[{target.address}]:")))
    done = cli("trust-host", jump_host.target, "--fingerprint", fp(target), known=known)
    assert done.returncode == 0, done.stderr
    assert SSHTransport(jump_host.target, options=options(known)).run(["true"]).ok


def test_known_hosts_with_every_kind_of_line(operator_ssh, ssh_hosts, tmp_path):
    h2, h3 = ssh_hosts
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(h2))
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")   # the name is hashed now, as HashKnownHosts does
    ca = h3.host_key_pub.split()[:2]
    before = ("# cluster hosts\n" + known.read_text() + SK_LINE
              + f"@cert-authority *.example.org {ca[0]} {ca[1]} our CA\n"
              + f"@revoked [gpu8]:22 {ca[0]} {ca[1]}\n" + "a line no parser understands\n")
    known.write_text(before)
    assert SSHTransport("h2", options=options(known)).run(["true"]).ok   # the hashed line matches
    # A CA key trusts certificates only: h3's plain key is still unknown, although its key is the CA's.
    with pytest.raises(HostKeyError, match="unknown host key"):
        SSHTransport("h3", options=options(known)).run(["true"])
    assert cli("trust-host", "h3", "--fingerprint", fp(h3), known=known).returncode == 0
    after = known.read_text()
    assert after.startswith(before) and after.count("\n") == before.count("\n") + 1
    assert stat.S_IMODE(os.stat(known).st_mode) == 0o600
    assert SSHTransport("h3", options=options(known)).run(["true"]).ok


def test_a_revoked_key_is_refused(operator_ssh, ssh_hosts, tmp_path):
    known = tmp_path / "known_hosts"
    key = ssh_hosts[0].host_key_pub.split()[:2]
    known.write_text(sshd.known_hosts_line(ssh_hosts[0]) + f"@revoked * {key[0]} {key[1]}\n")
    with pytest.raises(HostKeyError, match="revoked"):
        SSHTransport("h2", options=options(known)).run(["true"])


def test_a_changed_key_is_replaced_only_by_explicit_choice(operator_ssh, ssh_hosts, tmp_path):
    h2, h3 = ssh_hosts
    known = tmp_path / "known_hosts"
    # h3's key filed under h2's name: to the client, h2's key has changed.
    wrong = sshd.known_hosts_line(h3).replace(f"[{h3.address}]:{h3.port}", f"[{h2.address}]:{h2.port}")
    before = "# keep me\n" + wrong + sshd.known_hosts_line(h3)
    known.write_text(before)
    with pytest.raises(HostKeyError, match="CHANGED") as err:
        SSHTransport("h2", options=options(known)).run(["true"])
    assert fp(h3) in str(err.value) and fp(h2) in str(err.value)   # both fingerprints
    shown = cli("trust-host", "h2", known=known)
    assert shown.returncode == 1 and "CHANGED" in shown.stdout and fp(h3) in shown.stdout
    refused = cli("trust-host", "h2", "--fingerprint", fp(h2), known=known)
    assert refused.returncode != 0 and "CHANGED" in refused.stderr and "Traceback" not in refused.stderr
    assert known.read_text() == before
    replaced = cli("trust-host", "h2", "--fingerprint", fp(h2), "--replace", known=known)
    assert replaced.returncode == 0, replaced.stderr
    assert SSHTransport("h2", options=options(known)).run(["true"]).ok
    assert known.read_text().startswith("# keep me\n") and sshd.known_hosts_line(h3) in known.read_text()


def test_cli_errors_are_one_line(tmp_path):
    for args in (["trust-host", "127.0.0.1", "--port", str(sshd.free_port())], ["trust-host", "nohost.invalid"]):
        proc = cli(*args, known=tmp_path / "kh")
        assert proc.returncode != 0 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Check" in proc.stderr
