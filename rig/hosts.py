"""Several real sshd hosts on loopback addresses (127.0.0.2, .3, ...) sharing one fresh key, and
the SSH options that trust exactly them: what the launch benchmarks start before they measure."""
from __future__ import annotations

from pathlib import Path

from backend.hosts.ssh import SSHOptions
from rig import sshd


def start_hosts(root: Path, count: int):
    """``count`` hosts under ``root``: (hosts, the key's path, SSHOptions). Stop each with ``.stop()``."""
    key = root / "id_ed25519"
    sshd.keygen(key)
    (root / "authorized_keys").write_text((root / "id_ed25519.pub").read_text())
    hosts = [sshd.make_host(root, f"127.0.0.{n + 2}", root / "authorized_keys") for n in range(count)]
    known = root / "known_hosts"
    known.write_text("".join(sshd.known_hosts_line(h) for h in hosts))
    options = SSHOptions(known_hosts=str(known), ssh_config=str(root / "none"),
                         allow_agent=False, look_for_keys=False)
    return hosts, key, options
