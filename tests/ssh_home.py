"""The test user's ``~/.ssh`` as an operator keeps it, inside the session's private HOME.

``~/.ssh/config`` names every test host by an alias (``Host h2`` / ``HostName 127.0.0.2`` /
``Port ...``), a ``Host *`` block gives ``User`` and ``IdentityFile`` (a key under a name OpenSSH
would not try by itself, so ignoring the config fails), and ``~/.ssh/known_hosts`` trusts each host
key, as after the operator's ``ssh-keyscan`` and check. With ``SSHOptions()`` defaults the product
reads exactly these files, as it would on an operator's machine.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from rig.sshd import SSHHost, known_hosts_line

KEY_NAME = "cluster_ed25519"


class OperatorSSH:
    def __init__(self, home: Path, client_key: Path, user: str) -> None:
        self.dir = home / ".ssh"
        self.dir.mkdir(mode=0o700, exist_ok=True)
        self.key = self.dir / KEY_NAME
        shutil.copyfile(client_key, self.key)
        shutil.copyfile(f"{client_key}.pub", f"{self.key}.pub")
        self.key.chmod(0o600)
        self.user = user
        self.config = self.dir / "config"
        self.known_hosts = self.dir / "known_hosts"
        self.blocks: dict[str, dict[str, str]] = {}
        self.write()

    def add(self, alias: str, host: SSHHost, *, trust: bool = True, **options: str) -> str:
        """Name ``host`` ``alias`` (extra ``options`` such as ProxyJump="h4"); trust its key."""
        self.blocks[alias] = {"HostName": host.address, "Port": str(host.port), **options}
        if trust:
            with self.known_hosts.open("a") as fh:
                fh.write(known_hosts_line(host))
        self.write()
        return alias

    def remove(self, alias: str) -> None:
        self.blocks.pop(alias, None)
        self.write()

    def write(self) -> None:
        text = ["# An operator's ~/.ssh/config for the loopback test hosts (tests/ssh_home.py)."]
        for alias, options in self.blocks.items():
            text += [f"Host {alias}", *(f"    {k} {v}" for k, v in options.items())]
        text += ["Host *", f"    User {self.user}", f"    IdentityFile ~/.ssh/{KEY_NAME}", ""]
        self.config.write_text("\n".join(text))
        self.known_hosts.touch()
