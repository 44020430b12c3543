"""A private network namespace for hosts the test client must not reach directly.

The jump-host tests need a target that only the jump host can reach, as on a real cluster whose
workers sit on a private network. Loopback cannot give that: every connection from this machine
to 127.0.0.N comes from 127.0.0.1, so sshd's ``Match Address`` cannot tell the jump host from the
client. A network namespace can: the jump host's sshd and the target's sshd run inside one, and
the jump host's SSH port is handed to the outside world through one listening socket that this
module's bridge forwards inward. Nothing listens on the target's address outside the namespace, so
a direct connection is refused; the jump host's sshd dials the target inside the namespace.

Needs root (CAP_SYS_ADMIN), ``unshare``/``nsenter`` (util-linux) and ``ip`` (iproute2).
Run as a script, this file is the bridge: ``netns.py --fd N --to ADDRESS:PORT``.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time

TOOLS = ("unshare", "nsenter", "ip")


def available() -> bool:
    """True when this machine lets the test user make a network namespace."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in TOOLS):
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


class Netns:
    """A namespace held open by a sleeping process; ``argv`` runs a command inside it."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"])
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.time() + 10
        while self._ns() in (None, mine):   # unshare has not switched yet
            if time.time() > deadline or self.holder.poll() is not None:
                raise RuntimeError("could not create a network namespace")
            time.sleep(0.02)
        subprocess.run(self.argv(["ip", "link", "set", "lo", "up"]), check=True)

    def _ns(self) -> str | None:
        try:
            return os.readlink(f"/proc/{self.holder.pid}/ns/net")
        except OSError:
            return None

    def argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--", *argv]

    def wait_port(self, address: str, port: int, timeout: float = 10.0) -> None:
        probe = ("import socket,sys,time\nend=time.time()+float(sys.argv[3])\n"
                 "while time.time()<end:\n"
                 " s=socket.socket()\n"
                 " if s.connect_ex((sys.argv[1],int(sys.argv[2])))==0: sys.exit(0)\n"
                 " s.close(); time.sleep(0.05)\nsys.exit(1)")
        argv = self.argv([sys.executable, "-c", probe, address, str(port), str(timeout)])
        if subprocess.run(argv).returncode != 0:
            raise RuntimeError(f"nothing listens on {address}:{port} inside the namespace")

    def bridge(self, outside: tuple[str, int], inside: tuple[str, int]) -> subprocess.Popen:
        """Forward connections to ``outside`` (this namespace) to ``inside`` (the private one)."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(outside)
        listener.listen(16)
        fd = listener.fileno()
        proc = subprocess.Popen(self.argv([sys.executable, os.path.abspath(__file__), "--fd", str(fd),
                                           "--to", f"{inside[0]}:{inside[1]}"]), pass_fds=[fd])
        listener.close()   # the bridge holds its own copy
        return proc

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=10)


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy bytes from src to dst until either side closes, then shut both down."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(fd: int, to: str) -> None:
    address, _, port = to.rpartition(":")
    listener = socket.socket(fileno=fd)
    while True:
        client, _ = listener.accept()
        try:
            inner = socket.create_connection((address, int(port)), timeout=10)
            inner.settimeout(None)
        except OSError:
            client.close()
            continue
        for a, b in ((client, inner), (inner, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    _serve(int(sys.argv[sys.argv.index("--fd") + 1]), sys.argv[sys.argv.index("--to") + 1])
