"""One resolved view of every host: the ``~/.ssh/config`` lookup applied, the alias kept.

Operators name machines the way they ``ssh`` to them: ``Host h2`` / ``HostName 10.0.0.7`` /
``Port 2222`` / ``User`` / ``IdentityFile`` / ``ProxyJump``. Connect, trust, preflight and
``TF_CONFIG`` all read a host through ``resolve`` here, so the four never disagree about where
``h2`` is. Values given on the task (ssh_port, user, identity_file, jump_host) win over the
config, as options on OpenSSH's command line win over its config file. How names become
addresses is documented in docs/hosts.md ("How names become addresses").
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import paramiko

from backend.errors import ConsoleError

if TYPE_CHECKING:
    from backend.config.spec import ClusterSpec, TaskSpec

DEFAULT_CONFIG = "~/.ssh/config"


@dataclass(frozen=True)
class HostView:
    """Where one host name leads once ssh_config is applied."""
    alias: str                  # what the operator wrote: shown in every message
    hostname: str               # what SSH dials: the config's HostName, else the alias
    port: int
    user: str | None
    key_files: tuple[str, ...]
    jump: str | None            # ProxyJump: "[user@]host[:port]", hops separated by commas
    key_alias: str | None = None  # HostKeyAlias: the name its key is filed under in known_hosts

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files this host's key under: ``host`` on port 22, else ``[host]:port``."""
        return host_port_name(self.key_alias or self.hostname, self.port)

    @property
    def label(self) -> str:
        """``h2 (127.0.0.2:2222)``, or just ``host:port`` when the name is the address."""
        where = f"{bracket(self.hostname)}:{self.port}"
        via = f" via {self.jump}" if self.jump else ""
        return (where if self.alias == self.hostname else f"{self.alias} ({where})") + via


def bracket(host: str) -> str:
    """An IPv6 address in brackets, so a ``:port`` after it reads unambiguously."""
    return f"[{host}]" if ":" in host else host


def host_port_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def read_config(path: str = DEFAULT_CONFIG) -> paramiko.SSHConfig:
    """The parsed ssh_config; an empty one when the file does not exist."""
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(full)
    except (OSError, UnicodeDecodeError, paramiko.SSHException) as err:
        raise ConsoleError(f"cannot read the ssh_config {full}: {err}.",
                           "Fix that file (ssh -G HOST shows how OpenSSH reads it), or point "
                           "--ssh-config / the console's ssh_config setting elsewhere.") from None


def resolve(host: str, *, port: int | None = None, user: str | None = None,
            identity_file: str | None = None, jump_host: str | None = None,
            ssh_config: str | paramiko.SSHConfig = DEFAULT_CONFIG) -> HostView:
    conf = ssh_config if isinstance(ssh_config, paramiko.SSHConfig) else read_config(ssh_config)
    entry = conf.lookup(host)  # keys are lower case; identityfile is a list
    keys = [identity_file] if identity_file else entry.get("identityfile", [])
    jump = jump_host or entry.get("proxyjump")
    try:
        number = int(port or entry.get("port", 22))
    except ValueError:
        raise ConsoleError(f"{host}: the ssh_config gives Port {entry.get('port')!r}.",
                           "Fix the Port line for this host in the ssh_config.") from None
    return HostView(alias=host, hostname=entry.get("hostname", host), port=number,
                    user=user or entry.get("user"),
                    key_files=tuple(os.path.expanduser(k) for k in keys),
                    jump=None if not jump or jump.lower() == "none" else jump,
                    key_alias=entry.get("hostkeyalias"))


def resolve_task(task: "TaskSpec", ssh_config: str | paramiko.SSHConfig = DEFAULT_CONFIG) -> HostView:
    return resolve(task.host, port=task.ssh_port, user=task.user, identity_file=task.identity_file,
                   jump_host=task.jump_host, ssh_config=ssh_config)


def split_jump(spec: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` with an IPv6 host in brackets -> (user, host, port)."""
    user, _, rest = spec.strip().rpartition("@")
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port = rest.partition(":")
    if not host or (port and not port.isdigit()):
        raise ConsoleError(f"jump host {spec!r} is not [user@]host[:port].",
                           "Write it as [user@]host[:port], with an IPv6 host in [brackets].")
    return user or None, host, int(port) if port else None


def split_hops(jump: str) -> tuple[str | None, str]:
    """``a,b,c`` -> (``a,b``, ``c``): the last hop is dialled through the ones before it."""
    before, _, last = jump.rpartition(",")
    return (before or None), last


# ---- TF_CONFIG addresses --------------------------------------------------------------------

def tf_host(task: "TaskSpec", ssh_config: str | paramiko.SSHConfig = DEFAULT_CONFIG) -> str:
    """The name every worker dials for this task: its ``address``, else what SSH resolves."""
    from backend.config.spec import TransportKind
    if task.address:
        return task.address
    if task.transport is TransportKind.LOCAL:
        return task.host
    return resolve_task(task, ssh_config).hostname


def tf_hosts(cluster: "ClusterSpec", ssh_config: str | paramiko.SSHConfig = DEFAULT_CONFIG) -> list[str]:
    """Each task's host as its peers dial it, in task order."""
    conf = ssh_config if isinstance(ssh_config, paramiko.SSHConfig) else read_config(ssh_config)
    return [tf_host(t, conf) for t in cluster.tasks]


def tf_addresses(cluster: "ClusterSpec", ssh_config: str | paramiko.SSHConfig = DEFAULT_CONFIG) -> list[str]:
    """``host:port`` for each task, in task order, as it goes into TF_CONFIG."""
    return [f"{bracket(h)}:{t.tf_port}" for h, t in zip(tf_hosts(cluster, ssh_config), cluster.tasks)]
