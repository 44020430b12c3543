"""SSH adapter over paramiko: thin, each method one channel call. No SFTP: files travel as
commands (``backend.hosts.remote``), so hosts whose sshd has no SFTP subsystem work.

Every SSH choice lives in ``SSHOptions`` with the reason next to it. Host keys are checked
against a known_hosts file and never accepted silently: an unknown key raises ``HostKeyError``
with its fingerprint, and only ``trust_host_key`` (an explicit operator action) records one.
Passwords and passphrases stay in memory; nothing here writes them to disk or logs.
"""
from __future__ import annotations

import logging
import os
import select
import shlex
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import paramiko

from backend.errors import HostError, HostKeyError
from backend.hosts.base import Lines, Result
from backend.hosts.known_hosts import Entry, KnownHosts, Verdict, blob_fingerprint, changed_error
from backend.hosts.resolve import host_port_name, resolve, split_hops, split_jump
from backend.hosts.served import ServedPool

# What paramiko and the socket below it raise when a link breaks; the edge maps them to HostError.
IO_FAILURES = (OSError, EOFError, paramiko.SSHException)


# paramiko's transport thread logs a traceback for every failed connection; with no logging set
# up, Python prints it to stderr. Each such failure already becomes one of our HostErrors, so the
# traceback goes nowhere unless the embedding program configures logging itself.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# sshd hangs up before its banner when it is past MaxStartups (it then drops new unauthenticated
# connections at random) or busy re-executing itself under load. A moment later the same
# connection nearly always gets through, so that one failure is tried again, after these pauses.
HANGUP_PAUSES_S = (0.5, 1.5)
# The served channel's one login may cost what a slow ~/.bashrc costs (preflight names it):
# its start is given this long beyond the usual answer, once per host.
SERVER_LOGIN_S = 30.0
SERVED_STDIN_MAX = 1 << 20   # a larger input (a project's tar) gets its own exec channel


def _missing_keys(paths: list[str]) -> str:
    """The start of a fix that names identity files that are not there (none: empty)."""
    if not paths:
        return ""
    return (f"The identity file {', '.join(paths)} does not exist: fix IdentityFile in ~/.ssh/config "
            "(or the task's identity_file) to name your private key. ")


def hung_up_early(err: BaseException, waited_s: float, banner_timeout_s: float) -> bool:
    """True when sshd closed the connection before it spoke. paramiko words a closed connection
    and a silent one alike ("Error reading SSH protocol banner"), so the time waited tells them apart."""
    if isinstance(err, (EOFError, ConnectionResetError)):
        return True
    return (isinstance(err, paramiko.SSHException) and str(err).startswith("Error reading SSH protocol banner")
            and waited_s < banner_timeout_s / 2)


def patient(attempt, banner_timeout_s: float):
    """``attempt()``, tried again after a short pause while sshd hangs up before speaking."""
    for pause in HANGUP_PAUSES_S:
        began = time.monotonic()
        try:
            return attempt()
        except IO_FAILURES as err:
            if not hung_up_early(err, time.monotonic() - began, banner_timeout_s):
                raise
        time.sleep(pause)
    return attempt()


@dataclass(frozen=True)
class SSHOptions:
    known_hosts: str = "~/.ssh/known_hosts"  # our own file in tests; the user's by default
    ssh_config: str = "~/.ssh/config"        # aliases, users, ports, keys, ProxyJump
    connect_timeout: float = 10.0            # an unreachable host must fail fast in preflight
    keepalive_s: int = 15                    # keep NAT and firewalls from dropping idle connections
    # How long the server may take to answer a channel open or an exec request. paramiko waits
    # for exec's answer with no limit, so past this that command's channel is closed (never the
    # connection: other commands on it go on): a cut link then fails within this bound instead of
    # hanging (docs/reliability.md, "network cut").
    answer_timeout_s: float = 10.0
    allow_agent: bool = True                 # keys in ssh-agent work as with OpenSSH
    look_for_keys: bool = True               # ~/.ssh/id_* when no identity file is given


def _pkey(entry: Entry) -> paramiko.PKey | None:
    try:
        return paramiko.PKey.from_type_string(entry.key_type, entry.blob)
    except (paramiko.SSHException, ValueError, TypeError):
        return None   # a type paramiko cannot parse (sk-...): it can only match by blob


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` form, so the operator can compare with ``ssh-keygen -lf``."""
    return blob_fingerprint(key.asbytes())


class _Verify(paramiko.MissingHostKeyPolicy):
    """Asked by paramiko when no key it was given trusts the server's: say why, never accept."""

    def __init__(self, label: str, known: KnownHosts, name: str, port: int | None = None) -> None:
        self.label, self.known, self.name, self.port = label, known, name, port

    def missing_host_key(self, client, hostname, key):
        verdict, found = self.known.check(self.name, key.get_name(), key.asbytes())
        fp = fingerprint(key)
        if verdict is Verdict.REVOKED:
            raise HostKeyError(self.label, f"host key {fp} is marked @revoked in {self.known.path} "
                               f"(line {found[0].number})",
                               "Do not connect; ask the host's owner why its key was revoked.",
                               fingerprint=fp, key_type=key.get_name())
        if verdict is Verdict.CHANGED:
            raise changed_error(self.label, self.known.path, found, key.get_name(), key.asbytes(),
                                port=self.port)
        raise HostKeyError(
            self.label, f"unknown host key {key.get_name()} {fp} for {self.name}",
            "Compare the fingerprint with the host's (ssh-keygen -lf /etc/ssh/ssh_host_*.pub) "
            "and trust it explicitly (console: Cluster > Trust a host key; CLI: trust-host).",
            fingerprint=fp, key_type=key.get_name())


class SSHTransport:
    def __init__(self, host: str, *, port: int | None = None, user: str | None = None,
                 identity_file: str | None = None, jump_host: str | None = None,
                 options: SSHOptions = SSHOptions(), password: str | None = None,
                 passphrase: str | None = None) -> None:
        self.host = host
        self.options = options
        self.target = resolve(host, port=port, user=user, identity_file=identity_file,
                              jump_host=jump_host, ssh_config=options.ssh_config)
        self._secrets = (password, passphrase)
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHTransport | None = None
        self._lock = threading.Lock()
        self._served = ServedPool(self)

    # -- connection ---------------------------------------------------------------------
    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client and self._client.get_transport() and self._client.get_transport().is_active():
                return self._client
            self._client = self._open()
            return self._client

    def _open(self) -> paramiko.SSHClient:
        try:
            return patient(self._open_once, self.options.connect_timeout)
        except (*IO_FAILURES, ValueError) as err:   # ValueError: paramiko on a malformed address
            raise HostError(self.host, f"cannot connect to {self.target.label}: {str(err) or type(err).__name__}",
                            "Check the host name, SSH port and that sshd runs there "
                            "(ssh -G HOST shows what ssh_config makes of the name).") from None

    def _port_said(self) -> int | None:
        """The port a trust-host command for this host must name (none for SSH's own 22)."""
        return self.target.port if self.target.port != 22 else None

    def _open_once(self) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        known = KnownHosts.read(self.options.known_hosts)
        # Only plain, unrevoked keys for this host go to paramiko, filed under the name it looks
        # up; that also makes it prefer the key types we know. _Verify explains everything else.
        for entry in known.trusted(t.known_hosts_name):
            key = _pkey(entry)
            if key is not None:
                client.get_host_keys().add(host_port_name(t.hostname, t.port), entry.key_type, key)
        client.set_missing_host_key_policy(_Verify(self.host, known, t.known_hosts_name, self._port_said()))
        sock = self._jump_channel() if t.jump else None
        password, passphrase = self._secrets
        # As OpenSSH: an identity file that does not exist is skipped (the agent may still have
        # the key); paramiko would stop at it with a bare "No such file or directory".
        keys = [k for k in t.key_files if os.path.exists(k)]
        missing = [k for k in t.key_files if k not in keys]
        try:
            client.connect(t.hostname, port=t.port, username=t.user,
                           key_filename=keys or None, password=password,
                           passphrase=passphrase, timeout=self.options.connect_timeout,
                           banner_timeout=self.options.connect_timeout,
                           auth_timeout=self.options.connect_timeout, sock=sock,
                           allow_agent=self.options.allow_agent,
                           look_for_keys=self.options.look_for_keys and not t.key_files)
        except HostKeyError:
            raise
        except paramiko.BadHostKeyException as err:
            found = [e for e in known.trusted(t.known_hosts_name) if e.blob == err.expected_key.asbytes()]
            raise changed_error(self.host, known.path, found, err.key.get_name(), err.key.asbytes(),
                                port=self._port_said()) from None
        except paramiko.AuthenticationException as err:
            client.close()
            raise HostError(self.host, f"authentication failed for user {t.user or '(default)'}: {err}",
                            _missing_keys(missing) + "Check the user and identity file, or load the key "
                            "into ssh-agent.") from None
        except paramiko.SSHException as err:
            client.close()
            if missing and "No authentication methods available" in str(err):   # nor an agent key
                raise HostError(self.host, f"no key to log in as {t.user or '(default)'} with",
                                _missing_keys(missing) + "Or load the key into ssh-agent.") from None
            raise   # _open maps the error or tries again
        except BaseException:
            client.close()   # this try is over; _open maps the error or tries again
            raise
        client.get_transport().set_keepalive(self.options.keepalive_s)
        return client

    def _jump_channel(self) -> paramiko.Channel:
        before, last = split_hops(self.target.jump)
        user, host, port = split_jump(last)
        if self._jump:
            self._jump.close()   # the previous connection's way in
        # The jump host is resolved through ssh_config too (an alias, its own ProxyJump);
        # earlier hops of "a,b" become the jump's own jump.
        self._jump = SSHTransport(host, port=port, user=user, jump_host=before, options=self.options)
        try:
            return self._jump._connect().get_transport().open_channel(
                "direct-tcpip", (self.target.hostname, self.target.port), ("127.0.0.1", 0),
                timeout=self.options.connect_timeout)
        except IO_FAILURES as err:
            raise HostError(self.host, f"jump host {host} cannot reach {self.target.hostname}:"
                            f"{self.target.port}: {err}",
                            "Check the HostName and Port as the jump host sees them.") from None

    # -- protocol -----------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float | None = 60,
            stdin: bytes | None = None) -> Result:
        command = shlex.join(argv)  # every element quoted: typed fields are data, never shell
        chan = self._start(command)
        try:
            chan.settimeout(timeout)
            _send(chan, stdin)
            chan.shutdown_write()
            out, err = _drain(chan, timeout)
            code = chan.recv_exit_status()  # only after reading, or a full window deadlocks
            if code == -1 and not chan.get_transport().is_active():
                raise EOFError("the connection closed before the command's exit status came")
        except TimeoutError:
            raise HostError(self.host, f"command timed out after {timeout} s",
                            "Check that the host is not overloaded and that its login shell starts "
                            "quickly (`time ssh HOST true`: a slow ~/.bashrc runs before every "
                            "command; `tfconsole preflight` names it), then retry.", command=command) from None
        except IO_FAILURES as err:
            raise self._lost(err, command) from None
        finally:
            _close(chan)
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"),
                      host=self.host, command=command)

    def call(self, argv: Sequence[str], *, timeout: float | None = 60,
             stdin: bytes | None = None) -> Result:
        """``run`` for a short host command whose ``argv[0]`` is a Python (hostctl's): over the
        host's served channel for that Python (backend/hosts/served.py: one login per host, not
        per command), or an exec channel where none starts or the input is large (an upload
        would hold the shared channel)."""
        if len(stdin or b"") > SERVED_STDIN_MAX:
            return self.run(argv, timeout=timeout, stdin=stdin)
        served = self._served.get(argv[0], self.options.answer_timeout_s + SERVER_LOGIN_S)
        if served is None:
            return self.run(argv, timeout=timeout, stdin=stdin)
        return served.call(argv, stdin=stdin, timeout=timeout)

    def stream(self, argv: Sequence[str], *, idle_timeout: float | None = None) -> "SSHStream":
        command = shlex.join(argv)
        chan = self._start(command)
        chan.settimeout(idle_timeout)   # a read that waits longer raises: a cut link is noticed
        return SSHStream(self.host, chan)

    def _start(self, command: str) -> paramiko.Channel:
        """A channel running ``command``, or HostError within ``answer_timeout_s``.

        paramiko's exec_command waits for the server's answer with no limit; closing the channel
        wakes that wait (Channel.close sets the event it waits on). Only this command's channel
        is closed: the connection, and every other command on it (an export, a log stream),
        goes on. A link that is really cut fails each command within this bound all the same.
        """
        client = self._connect()
        limit = self.options.answer_timeout_s
        began = time.monotonic()
        try:
            chan = client.get_transport().open_session(timeout=limit)
        except IO_FAILURES as err:
            if time.monotonic() - began >= limit:   # paramiko's own "Timeout opening channel."
                raise self._silent(limit, command) from None
            raise self._lost(err, command) from None
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _close(chan)
        timer = threading.Timer(max(0.0, limit - (time.monotonic() - began)), expire)
        timer.daemon = True
        timer.start()
        try:
            chan.exec_command(command)
        except IO_FAILURES as err:
            if expired.is_set():
                raise self._silent(limit, command) from None
            _close(chan)
            raise self._lost(err, command) from None
        finally:
            timer.cancel()
        if expired.is_set():   # the timer closed it just as the answer came: it cannot be used
            raise self._silent(limit, command)
        return chan

    def _silent(self, limit: float, command: str) -> HostError:
        return HostError(self.host, f"no answer within {limit:g} s; this command was abandoned",
                         "Check the network to this host and its load; the next command tries again.",
                         command=command)

    def _lost(self, err: BaseException, command: str) -> HostError:
        return HostError(self.host, f"connection lost: {type(err).__name__}: {err}",
                         "Check that the host is up and sshd runs there; the next command connects again.",
                         command=command)

    def close(self) -> None:
        self._served.close()
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


SEND_CHUNK = 256 * 1024


def _send(chan, data: bytes | None) -> None:
    """``data`` to the command's stdin in pieces: paramiko's ``sendall`` copies what is left after
    every 32 KiB packet, so one call with a 50 MB project took 11 s on loopback (0.3 s in pieces)."""
    view = memoryview(data or b"")
    for start in range(0, len(view), SEND_CHUNK):
        chan.sendall(bytes(view[start:start + SEND_CHUNK]))


def _drain(chan: paramiko.Channel, timeout: float | None) -> tuple[bytes, bytes]:
    """Read stdout and stderr together until the command ends (either can fill the window).

    Ended means EOF (or the channel closed), not the exit status: sshd may send the status
    before the last of the output (a 75 kB output came back as 32 kB, tests/integration/
    test_hostctl.py)."""
    out, err = bytearray(), bytearray()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        busy = False
        while chan.recv_ready():
            out += chan.recv(65536); busy = True
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536); busy = True
        if (chan.eof_received or chan.closed) and not chan.recv_ready() and not chan.recv_stderr_ready():
            return bytes(out), bytes(err)
        if deadline and time.monotonic() > deadline:
            raise TimeoutError()
        if not busy:
            _wait_for_more(chan, deadline)


def _wait_for_more(chan: paramiko.Channel, deadline: float | None) -> None:
    """Sleep until either stream has data or the command ends, without spinning (a 5 ms poll
    loop here took 14 % of the console's CPU samples with a run live, bench/README.md). The channel's fileno is
    readable while data waits, and for good after EOF; the exit status comes with or after it."""
    wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
    ready, _, _ = select.select([chan], [], [], wait)
    if ready and not chan.recv_ready() and not chan.recv_stderr_ready():
        chan.status_event.wait(min(wait, 0.01))


class SSHStream:
    def __init__(self, host: str, chan: paramiko.Channel) -> None:
        self._chan = chan
        self.stdout = Lines(host, chan.makefile("rb"), IO_FAILURES)

    def alive(self) -> bool:
        return not self._chan.closed and not self._chan.exit_status_ready()

    def close(self) -> None:
        _close(self._chan)  # sshd hangs up the agent, which exits on SIGHUP / stdin EOF
