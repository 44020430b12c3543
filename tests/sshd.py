"""Real OpenSSH servers for tests: one per loopback address, each with its own host key.

They run as the test user (root in CI), listen on 127.0.0.N only, and accept one client key
generated for the session. Nothing here is a fake: the SSH adapter talks to Debian's sshd.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class SSHHost:
    address: str
    port: int
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def host_key_pub(self) -> str:
        return (self.folder / "host_ed25519.pub").read_text()

    def start(self, authorized_keys: Path) -> "SSHHost":
        conf = self.folder / "sshd_config"
        conf.write_text("\n".join([
            f"Port {self.port}", f"ListenAddress {self.address}",
            f"HostKey {self.folder / 'host_ed25519'}",
            f"AuthorizedKeysFile {authorized_keys}",
            f"PidFile {self.folder / 'sshd.pid'}",
            "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password", "UsePAM no", "Subsystem sftp internal-sftp",
            "AllowTcpForwarding yes", "LogLevel ERROR", "",
        ]))
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(conf)],
                                        stdout=subprocess.DEVNULL, stderr=open(self.folder / "sshd.log", "ab"))
        wait_port(self.address, self.port)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def wait_port(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {address}:{port} did not start")


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def make_host(root: Path, address: str, authorized_keys: Path) -> SSHHost:
    folder = root / address
    folder.mkdir(parents=True, exist_ok=True)
    keygen(folder / "host_ed25519")
    os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None  # privsep dir
    return SSHHost(address, free_port(address), folder).start(authorized_keys)


def known_hosts_line(host: SSHHost) -> str:
    key_type, key = host.host_key_pub.split()[:2]
    return f"[{host.address}]:{host.port} {key_type} {key}\n"
