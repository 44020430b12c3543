"""sshd that hangs up before its banner (past MaxStartups, or busy under load): the connection is
tried again after a short pause, and a host that keeps hanging up ends in one HostError line,
with no paramiko traceback on stderr. A host that is silent is not retried (its bound holds)."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.errors import HostError
from backend.hosts.ssh import SSHOptions, SSHTransport
from backend.hosts.trust import fetch_host_key
from rig import sshd
from rig.netns import pump

ROOT = Path(__file__).resolve().parents[2]


class Doorman:
    """A TCP front for a real sshd: closes the first ``hangups`` connections at once (as sshd does
    past MaxStartups), then forwards each later one to the sshd behind it, byte for byte."""

    def __init__(self, behind: tuple[str, int] | None, hangups: int, silent: bool = False) -> None:
        self.behind, self.hangups, self.silent = behind, hangups, silent
        self.accepted = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.silent:
                continue            # keep it open and say nothing
            if self.accepted <= self.hangups or self.behind is None:
                conn.close()
                continue
            back = socket.create_connection(self.behind)
            for a, b in ((conn, back), (back, conn)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.server.close()


def known_for(tmp_path, host: sshd.SSHHost, port: int) -> Path:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(host).replace(f"[{host.address}]:{host.port}", f"[127.0.0.1]:{port}"))
    return known


def test_a_hangup_before_the_banner_is_tried_again(ssh_hosts, client_key, tmp_path):
    host = ssh_hosts[0]
    door = Doorman((host.address, host.port), hangups=2)
    try:
        options = SSHOptions(known_hosts=str(known_for(tmp_path, host, door.port)),
                             ssh_config=str(tmp_path / "none"), allow_agent=False, look_for_keys=False)
        result = SSHTransport("127.0.0.1", port=door.port, identity_file=str(client_key), options=options).run(["echo", "hi"])
        assert result.ok and result.stdout == "hi\n" and door.accepted == 3
        assert fetch_host_key("127.0.0.1", port=door.port, options=options).fingerprint.startswith("SHA256:")
    finally:
        door.close()


def test_a_host_that_keeps_hanging_up_is_one_clear_error(tmp_path):
    door = Doorman(None, hangups=10**6)
    try:
        options = SSHOptions(known_hosts=str(tmp_path / "kh"), ssh_config=str(tmp_path / "none"),
                             allow_agent=False, look_for_keys=False)
        with pytest.raises(HostError, match="cannot connect to .*Check the host name"):
            SSHTransport("127.0.0.1", port=door.port, options=options).run(["true"])
        assert door.accepted == 3            # the first try and two more, then it gives up
        proc = subprocess.run([sys.executable, "-m", "backend", "--known-hosts", str(tmp_path / "kh"),
                               "trust-host", "127.0.0.1", "--port", str(door.port)],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "could not read the host key" in proc.stderr
    finally:
        door.close()


def test_a_silent_host_is_not_tried_again(tmp_path):
    door = Doorman(None, hangups=0, silent=True)
    try:
        options = SSHOptions(known_hosts=str(tmp_path / "kh"), ssh_config=str(tmp_path / "none"),
                             allow_agent=False, look_for_keys=False, connect_timeout=2)
        began = time.monotonic()
        with pytest.raises(HostError, match="cannot connect"):
            SSHTransport("127.0.0.1", port=door.port, options=options).run(["true"])
        assert door.accepted == 1 and time.monotonic() - began < 6
    finally:
        door.close()
