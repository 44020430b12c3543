"""A real PostgreSQL server for the tests, on loopback, in a temporary folder.

Debian's ``postgresql`` package started directly (``initdb`` and ``postgres``, no cluster manager,
no systemd): a private data folder, a free port on 127.0.0.1, a private socket folder, and trust
authentication for loopback connections only. ``initdb`` refuses to run as root, so as root the
server runs as the package's ``postgres`` user. ``stop()`` ends it and checks that it is gone;
nothing is left in /etc or /var/lib.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rig.sshd import free_port

SERVICE_USER = "postgres"   # the Debian package's own user
DATABASE = "sweeps"


def binaries() -> str | None:
    """The folder of the newest installed server's programs (``/usr/lib/postgresql/N/bin``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return str(Path(found[-1]).parent) if found else None


def missing() -> list[str]:
    """What a server needs and this machine lacks."""
    out = [] if binaries() else ["postgresql (Debian's postgresql package)"]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            out.append(f"the {SERVICE_USER} user (Debian's postgresql package makes it)")
    return out


@dataclass
class Server:
    folder: Path
    port: int
    process: subprocess.Popen

    @property
    def url(self) -> str:
        """An SQLAlchemy URL for the test database, as an operator writes one."""
        return f"postgresql+psycopg2://{SERVICE_USER}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()   # SIGTERM: postgres' "smart" shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


def start(timeout: float = 60.0) -> Server:
    """A running server with an empty ``sweeps`` database; raises RuntimeError with its log."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server installed (apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="tfc-pg-"))
    data, sockets = folder / "data", folder / "sock"
    sockets.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SERVICE_USER)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        os.chown(sockets, entry.pw_uid, entry.pw_gid)
        as_user = ["runuser", "-u", SERVICE_USER, "--"]
    init = subprocess.run([*as_user, f"{bin_dir}/initdb", "-D", str(data), "-U", SERVICE_USER,
                           "--auth=trust", "-E", "UTF8", "--no-sync"],
                          capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
    port = free_port()
    log = open(folder / "server.log", "wb")
    process = subprocess.Popen(
        [*as_user, f"{bin_dir}/postgres", "-D", str(data), "-p", str(port), "-k", str(sockets),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(folder, port, process)
    deadline = time.time() + timeout
    while True:
        made = subprocess.run([f"{bin_dir}/createdb", "-h", "127.0.0.1", "-p", str(port),
                               "-U", SERVICE_USER, DATABASE], capture_output=True, text=True)
        if made.returncode == 0:
            return server
        if process.poll() is not None or time.time() > deadline:
            text = (folder / "server.log").read_text(errors="replace")[-2000:]
            server.stop()
            raise RuntimeError(f"PostgreSQL did not start: {made.stderr.strip()}\n{text}")
        time.sleep(0.2)
