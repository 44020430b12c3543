"""SSH adapter over paramiko: thin, each method one channel call.

Every SSH choice lives in ``SSHOptions`` with the reason next to it. Host keys are checked
against a known_hosts file and never accepted silently: an unknown key raises ``HostKeyError``
with its fingerprint, and only ``trust_host_key`` (an explicit operator action) records one.
Passwords and passphrases stay in memory; nothing here writes them to disk or logs.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import paramiko

from backend.errors import HostError, HostKeyError
from backend.hosts.base import Lines, Result

# What paramiko and the socket below it raise when a link breaks; the edge maps them to HostError.
IO_FAILURES = (OSError, EOFError, paramiko.SSHException)


@dataclass(frozen=True)
class SSHOptions:
    known_hosts: str = "~/.ssh/known_hosts"  # our own file in tests; the user's by default
    ssh_config: str = "~/.ssh/config"        # aliases, users, ports, keys, ProxyJump
    connect_timeout: float = 10.0            # an unreachable host must fail fast in preflight
    keepalive_s: int = 15                    # keep NAT and firewalls from dropping idle connections
    # How long the server may take to answer a channel open or an exec request. paramiko waits
    # for exec's answer with no limit, so past this the connection is dropped: a cut link then
    # fails within this bound instead of hanging (docs/reliability.md, "network cut").
    answer_timeout_s: float = 10.0
    allow_agent: bool = True                 # keys in ssh-agent work as with OpenSSH
    look_for_keys: bool = True               # ~/.ssh/id_* when no identity file is given


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` form, so the operator can compare with ``ssh-keygen -lf``."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, label: str) -> None:
        self.label = label

    def missing_host_key(self, client, hostname, key):
        raise HostKeyError(
            self.label, f"unknown host key {key.get_name()} {fingerprint(key)} for {hostname}",
            "Compare the fingerprint with the host's (ssh-keygen -lf /etc/ssh/ssh_host_*.pub) "
            "and trust it explicitly (console: Cluster > Trust host key; CLI: trust-host).",
            fingerprint=fingerprint(key), key_type=key.get_name())


@dataclass(frozen=True)
class Target:
    """Where to connect, after ~/.ssh/config has been applied."""
    hostname: str
    port: int
    user: str | None
    key_files: tuple[str, ...]
    jump: str | None


def resolve(host: str, port: int | None, user: str | None, identity_file: str | None,
            jump_host: str | None, options: SSHOptions) -> Target:
    conf = paramiko.SSHConfig()
    path = os.path.expanduser(options.ssh_config)
    if os.path.exists(path):
        conf = paramiko.SSHConfig.from_path(path)
    entry = conf.lookup(host)  # keys are lower case; identityfile is a list
    keys = [identity_file] if identity_file else entry.get("identityfile", [])
    return Target(hostname=entry.get("hostname", host),
                  port=int(port or entry.get("port", 22)),
                  user=user or entry.get("user"),
                  key_files=tuple(os.path.expanduser(k) for k in keys),
                  jump=jump_host or entry.get("proxyjump"))


def _split_jump(spec: str) -> tuple[str | None, str, int | None]:
    user, _, rest = spec.rpartition("@")
    host, _, port = rest.partition(":")
    return user or None, host, int(port) if port else None


class SSHTransport:
    def __init__(self, host: str, *, port: int | None = None, user: str | None = None,
                 identity_file: str | None = None, jump_host: str | None = None,
                 options: SSHOptions = SSHOptions(), password: str | None = None,
                 passphrase: str | None = None) -> None:
        self.host = host
        self.options = options
        self.target = resolve(host, port, user, identity_file, jump_host, options)
        self._secrets = (password, passphrase)
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHTransport | None = None
        self._lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            self._client = self._open()
            return self._client

    def _open(self) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        known = os.path.expanduser(self.options.known_hosts)
        if os.path.exists(known):
            client.load_host_keys(known)
        client.set_missing_host_key_policy(_RefuseUnknown(self.host))
        sock = self._jump_channel() if t.jump else None
        password, passphrase = self._secrets
        try:
            client.connect(t.hostname, port=t.port, username=t.user,
                           key_filename=list(t.key_files) or None, password=password,
                           passphrase=passphrase, timeout=self.options.connect_timeout,
                           banner_timeout=self.options.connect_timeout,
                           auth_timeout=self.options.connect_timeout, sock=sock,
                           allow_agent=self.options.allow_agent,
                           look_for_keys=self.options.look_for_keys and not t.key_files)
        except HostKeyError:
            raise
        except paramiko.BadHostKeyException as err:
            raise HostKeyError(
                self.host, f"host key CHANGED: expected {fingerprint(err.expected_key)}, "
                f"got {fingerprint(err.key)}",
                "This can be an attack. Confirm the host was reinstalled, then remove its old "
                f"line from {known} and trust the new key explicitly.",
                fingerprint=fingerprint(err.key), key_type=err.key.get_name()) from None
        except paramiko.AuthenticationException as err:
            raise HostError(self.host, f"authentication failed for user {t.user or '(default)'}: {err}",
                            "Check the user and identity file, or load the key into ssh-agent.") from None
        except (OSError, paramiko.SSHException) as err:
            raise HostError(self.host, f"cannot connect to {t.hostname}:{t.port}: {err}",
                            "Check the host name, SSH port and that sshd runs there.") from None
        client.get_transport().set_keepalive(self.options.keepalive_s)
        return client

    def _jump_channel(self) -> paramiko.Channel:
        user, host, port = _split_jump(self.target.jump)
        self._jump = SSHTransport(host, port=port, user=user, options=self.options)
        try:
            return self._jump._connect().get_transport().open_channel(
                "direct-tcpip", (self.target.hostname, self.target.port), ("127.0.0.1", 0),
                timeout=self.options.connect_timeout)
        except paramiko.SSHException as err:
            raise HostError(self.host, f"jump host {host} cannot reach {self.target.hostname}:"
                            f"{self.target.port}: {err}", "Check the jump host's network.") from None

    # -- protocol -----------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float | None = 60,
            stdin: bytes | None = None) -> Result:
        command = shlex.join(argv)  # every element quoted: typed fields are data, never shell
        chan = self._start(command)
        try:
            chan.settimeout(timeout)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = _drain(chan, timeout)
            code = chan.recv_exit_status()  # only after reading, or a full window deadlocks
            if code == -1 and not chan.get_transport().is_active():
                raise EOFError("the connection closed before the command's exit status came")
        except TimeoutError:
            raise HostError(self.host, f"command timed out after {timeout} s",
                            "Check that the host is not overloaded, then retry.", command=command) from None
        except IO_FAILURES as err:
            raise self._lost(err, command) from None
        finally:
            _close(chan)
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"),
                      host=self.host, command=command)

    def stream(self, argv: Sequence[str], *, idle_timeout: float | None = None) -> "SSHStream":
        command = shlex.join(argv)
        chan = self._start(command)
        chan.settimeout(idle_timeout)   # a read that waits longer raises: a cut link is noticed
        return SSHStream(self.host, chan)

    def _start(self, command: str) -> paramiko.Channel:
        """A channel running ``command``, or HostError within ``answer_timeout_s``.

        paramiko's exec_command waits for the server's answer with no limit; only closing the
        connection wakes that wait, so a timer does that, and the next call connects afresh.
        """
        client = self._connect()
        limit = self.options.answer_timeout_s
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            client.close()
        timer = threading.Timer(limit, expire)
        timer.daemon = True
        timer.start()
        try:
            chan = client.get_transport().open_session(timeout=limit)
            chan.exec_command(command)
            return chan
        except IO_FAILURES as err:
            if expired.is_set():
                raise HostError(self.host, f"no answer within {limit:.0f} s; the connection was dropped",
                                "Check the network to this host; the next command connects again.",
                                command=command) from None
            raise self._lost(err, command) from None
        finally:
            timer.cancel()

    def _lost(self, err: BaseException, command: str) -> HostError:
        return HostError(self.host, f"connection lost: {type(err).__name__}: {err}",
                         "Check that the host is up and sshd runs there; the next command connects again.",
                         command=command)

    def put(self, local_path: str, remote_path: str) -> None:
        parent = os.path.dirname(remote_path)
        if parent:
            self.run(["mkdir", "-p", parent])
        try:
            with self._connect().open_sftp() as sftp:
                sftp.put(local_path, remote_path)
        except IO_FAILURES as err:
            raise self._lost(err, f"sftp put {remote_path}") from None

    def get(self, remote_path: str, local_path: str) -> None:
        try:
            with self._connect().open_sftp() as sftp:
                sftp.get(remote_path, local_path)
        except FileNotFoundError:
            raise HostError(self.host, f"no file {remote_path}",
                            "Check that the run directory exists on this host.") from None
        except IO_FAILURES as err:
            raise self._lost(err, f"sftp get {remote_path}") from None

    def close(self) -> None:
        with self._lock:
            if self._client:
                self._client.close()
                self._client = None
        if self._jump:
            self._jump.close()


def _close(chan: paramiko.Channel) -> None:
    try:
        chan.close()
    except IO_FAILURES:
        pass   # the connection is already gone: nothing left to release


def _drain(chan: paramiko.Channel, timeout: float | None) -> tuple[bytes, bytes]:
    """Read stdout and stderr together until the command ends (either can fill the window)."""
    out, err = bytearray(), bytearray()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        busy = False
        while chan.recv_ready():
            out += chan.recv(65536); busy = True
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536); busy = True
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            if chan.eof_received or not busy:
                return bytes(out), bytes(err)
        if deadline and time.monotonic() > deadline:
            raise TimeoutError()
        if not busy:
            time.sleep(0.005)


class SSHStream:
    def __init__(self, host: str, chan: paramiko.Channel) -> None:
        self._chan = chan
        self.stdout = Lines(host, chan.makefile("rb"), IO_FAILURES)

    def alive(self) -> bool:
        return not self._chan.closed and not self._chan.exit_status_ready()

    def close(self) -> None:
        _close(self._chan)  # sshd hangs up the agent, which exits on SIGHUP / stdin EOF


def fetch_host_key(host: str, port: int = 22, timeout: float = 10.0) -> paramiko.PKey:
    """The key a server offers, read without logging in, for the operator to check."""
    sock = socket.create_connection((host, port), timeout=timeout)
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    finally:
        transport.close()


def trust_host_key(host: str, port: int, expected_fingerprint: str, *,
                   known_hosts: str = "~/.ssh/known_hosts") -> str:
    """Record the host's key, only if it still has the fingerprint the operator approved."""
    key = fetch_host_key(host, port)
    got = fingerprint(key)
    if got != expected_fingerprint:
        raise HostKeyError(host, f"the key changed while you looked: now {got}",
                           "Do not trust it; check the host.", fingerprint=got, key_type=key.get_name())
    path = os.path.expanduser(known_hosts)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    keys = paramiko.HostKeys(path) if os.path.exists(path) else paramiko.HostKeys()
    keys.add(_known_hosts_name(host, port), key.get_name(), key)
    keys.save(path)
    return got
