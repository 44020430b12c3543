"""Real OpenSSH servers for tests: one per loopback address, each with its own host key.

They run as the test user (root in CI), listen on 127.0.0.N only, and accept one client key
generated for the session. Nothing here is a fake: the SSH adapter talks to Debian's sshd.

Every session on them starts in the test session's private HOME (a ``ForceCommand`` wrapper sets
HOME and changes into it before running the client's command), so a task whose workdir is relative
to the remote home ("tfconsole", the default) writes there, never into the real home of the user
sshd runs as. The hosts share that home, as cluster nodes sharing an NFS home do.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server",
                "/usr/libexec/sftp-server", "/usr/lib/ssh/sftp-server")
# Runs every session: the command the client asked for, from the private home, through sh
# (sshd itself would use the login shell; both take the POSIX quoting the adapter produces).
# ``shell="/bin/bash"`` is a host whose login shell is bash, as Debian's is: bash run for sshd
# (SSH_CLIENT set, first shell level) reads ~/.bashrc before every command, as on a real host.
SESSION_WRAPPER = """#!/bin/sh
export HOME={home}
cd "$HOME" || exit 1
if [ -z "$SSH_ORIGINAL_COMMAND" ]; then exec {shell} -l; fi
exec {shell} -c "$SSH_ORIGINAL_COMMAND"
"""


def sftp_server() -> str:
    """The external SFTP server (the wrapper runs it; internal-sftp cannot be wrapped)."""
    return next((p for p in SFTP_SERVERS if os.path.exists(p)), "internal-sftp")


@dataclass
class SSHHost:
    address: str
    port: int
    folder: Path
    process: subprocess.Popen | None = None
    netns: object | None = None   # a rig.netns.Netns when the host lives in a private network

    @property
    def host_key_pub(self) -> str:
        return (self.folder / "host_ed25519.pub").read_text()

    def config_lines(self, authorized_keys: Path, home: str | None, sftp: bool,
                     shell: str = "/bin/sh") -> list[str]:
        lines = [f"Port {self.port}", f"ListenAddress {self.address}",
                 f"HostKey {self.folder / 'host_ed25519'}",
                 f"AuthorizedKeysFile {authorized_keys}",
                 f"PidFile {self.folder / 'sshd.pid'}",
                 "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "PermitRootLogin prohibit-password", "UsePAM no",
                 "AllowTcpForwarding yes", "LogLevel ERROR"]
        if os.environ.get("TFCONSOLE_TEST_TMPDIR"):   # the session's TMPDIR (tests/conftest.py)
            lines.append(f"SetEnv TMPDIR={os.environ['TFCONSOLE_TEST_TMPDIR']}")
        if sftp:
            lines.append(f"Subsystem sftp {sftp_server() if home else 'internal-sftp'}")
        if home:
            wrapper = self.folder / "session.sh"
            wrapper.write_text(SESSION_WRAPPER.format(home=home, shell=shell))
            wrapper.chmod(0o755)
            lines.append(f"ForceCommand {wrapper}")
        return lines + [""]

    def start(self, authorized_keys: Path, *, home: str | None = None, sftp: bool = True,
              shell: str = "/bin/sh") -> "SSHHost":
        """Start sshd; ``home``: the directory every session starts in (see the module notes)."""
        conf = self.folder / "sshd_config"
        conf.write_text("\n".join(self.config_lines(authorized_keys, home, sftp, shell)))
        argv = [SSHD, "-D", "-e", "-f", str(conf)]
        self.process = subprocess.Popen(self.netns.argv(argv) if self.netns else argv,
                                        stdout=subprocess.DEVNULL,
                                        stderr=open(self.folder / "sshd.log", "ab"))
        if self.netns:
            self.netns.wait_port(self.address, self.port)
        else:
            wait_port(self.address, self.port)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def kill_all(self) -> None:
        """The host vanishes: SIGKILL its sshd and every process sshd forked for a connection
        (open sessions die too). Processes the sessions started in sessions of their own (our
        detached tasks) live on, as they would on a real host whose sshd died."""
        if not self.process or self.process.poll() is not None:
            return
        doomed = descendants(self.process.pid) | {self.process.pid}
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=10)


def descendants(root: int) -> set[int]:
    """Every live descendant of ``root`` that is an sshd process, from /proc."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return {pid for pid in found if names.get(pid, "").startswith("sshd")}


def wait_port(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {address}:{port} did not start")


def wait_for_path(path: Path, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.05)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_free(port: int, address: str = "") -> bool:
    """Whether a server could bind ``port`` now; "" is every interface, as TensorFlow's binds."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as servers bind: TIME_WAIT is free
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


_handed_out: set[int] = set()


def free_port(address: str = "127.0.0.1", span: int = 1) -> int:
    """The first of ``span`` consecutive ports that nothing holds, none handed out before.

    Picked below the kernel's ephemeral range: a port from that range (what binding port 0 gives)
    can be taken by any outgoing connection between this check and the server's own bind. ci14
    saw a Slurm task's gRPC server find its port held through three attempts in a minute.
    """
    low = _ephemeral_low()
    for _ in range(1000):
        first = random.randrange(10000, low - span)
        ports = range(first, first + span)
        if _handed_out.isdisjoint(ports) and all(
                port_free(p, address) and port_free(p) for p in ports):
            _handed_out.update(ports)
            return first
    raise RuntimeError(f"no {span} free consecutive ports between 10000 and {low}")


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def make_host(root: Path, address: str, authorized_keys: Path, *, home: str | None = None,
              netns=None, port: int | None = None, sftp: bool = True, shell: str = "/bin/sh") -> SSHHost:
    """A started sshd on ``address``; ``netns``: inside that private network namespace."""
    folder = root / address
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "host_ed25519").exists():
        keygen(folder / "host_ed25519")
    os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None  # privsep dir
    host = SSHHost(address, port or free_port(address), folder, netns=netns)
    return host.start(authorized_keys, home=home, sftp=sftp, shell=shell)


def known_hosts_line(host: SSHHost) -> str:
    key_type, key = host.host_key_pub.split()[:2]
    return f"[{host.address}]:{host.port} {key_type} {key}\n"
