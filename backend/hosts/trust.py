"""Trusting a host key: an explicit operator action, never a silent one.

The host is named as the operator names it (an ssh_config alias, a non-22 port, a host behind a
ProxyJump); ``fetch_host_key`` reads the key it offers without logging in, through the same
resolution and jump hosts as a connection, and ``trust_host_key`` files it in known_hosts under
the name OpenSSH uses, only if it still has the fingerprint the operator checked. A different key
already trusted for that host is CHANGED and is replaced only with ``OnChange.REPLACE``.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

import paramiko

from backend.errors import HostError, HostKeyError
from backend.hosts.known_hosts import KnownHosts, OnChange, Verdict
from backend.hosts.resolve import HostView, resolve
from backend.hosts.ssh import IO_FAILURES, SSHOptions, SSHTransport, fingerprint, patient


@dataclass(frozen=True)
class OfferedKey:
    view: HostView
    key: paramiko.PKey
    verdict: Verdict          # what known_hosts says of it now

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


def _socket(view: HostView, options: SSHOptions):
    """A socket to the host's sshd: direct, or a channel through its jump host."""
    if not view.jump:
        return socket.create_connection((view.hostname, view.port), timeout=options.connect_timeout), None
    via = SSHTransport(view.alias, port=view.port, user=view.user, jump_host=view.jump, options=options)
    return via._jump_channel(), via


def _offered_key(view: HostView, options: SSHOptions) -> paramiko.PKey:
    """One try: connect, run the key exchange, hang up before logging in."""
    sock, via = _socket(view, options)
    try:
        transport = paramiko.Transport(sock)
        try:
            transport.banner_timeout = options.connect_timeout
            transport.start_client(timeout=options.connect_timeout)
            return transport.get_remote_server_key()
        finally:
            transport.close()
    finally:
        if via:
            via.close()


def fetch_host_key(host: str, *, port: int | None = None, options: SSHOptions = SSHOptions()) -> OfferedKey:
    """The key ``host`` offers now, and what known_hosts says of it. Raises HostError."""
    view = resolve(host, port=port, ssh_config=options.ssh_config)
    try:
        key = patient(lambda: _offered_key(view, options), options.connect_timeout)
    except (*IO_FAILURES, ValueError) as err:
        raise HostError(host, f"could not read the host key of {view.label}: {str(err) or type(err).__name__}",
                        "Check the host name, the SSH port and that sshd runs there "
                        "(ssh -G HOST shows what ssh_config makes of the name).") from None
    verdict, _ = KnownHosts.read(options.known_hosts).check(view.known_hosts_name, key.get_name(), key.asbytes())
    return OfferedKey(view, key, verdict)


def trust_host_key(host: str, expected_fingerprint: str, *, port: int | None = None,
                   options: SSHOptions = SSHOptions(), on_change: OnChange = OnChange.REFUSE) -> OfferedKey:
    """File the host's key in known_hosts, only if it still has the fingerprint approved."""
    offered = fetch_host_key(host, port=port, options=options)
    if offered.fingerprint != expected_fingerprint:
        raise HostKeyError(host, f"it offers {offered.fingerprint}, not the {expected_fingerprint} you approved",
                           "Do not trust it; check the fingerprint on the host again.",
                           fingerprint=offered.fingerprint, key_type=offered.key.get_name())
    KnownHosts.read(options.known_hosts).add(offered.view.known_hosts_name, offered.key.get_name(),
                                             offered.key.asbytes(), on_change=on_change)
    return offered
