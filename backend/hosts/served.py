"""The console's side of a served channel (the host's side: backend/client/harness/serve.py).

Over SSH every command goes through the user's login shell, which runs its startup files first
(bash run by sshd reads ~/.bashrc even for a command): a `conda init` there costs seconds per
command, and the short commands a live run needs every second (status, progress, metrics, Save
now) then time out. So those go over one long-lived channel per host and Python: the server
started once (one login), each command then a process it starts on the host with the same
argument list, in the same folder and environment. Long commands (a project's upload, a log
stream) keep their own exec channel.

A channel that breaks (the connection cut, the host rebooted) fails the commands waiting on it
with the transport's own error, and the next command starts a new server. A host where the
server cannot start (no such Python) gets plain exec channels, asked again after ``RETRY_S``.
"""
from __future__ import annotations

import itertools
import json
import shlex
import threading
import time
from pathlib import Path
from typing import Sequence

from backend.errors import HostError
from backend.hosts.base import Result

SERVER = (Path(__file__).resolve().parents[1] / "client" / "harness" / "serve.py").read_text()
RETRY_S = 60.0       # a host whose server would not start is asked again after this long
MARGIN_S = 5.0       # the server ends a command at its timeout; the answer may take this long more


class _Waiting:
    def __init__(self) -> None:
        self.started = threading.Event()   # the server has the command (as an exec channel's start)
        self.done = threading.Event()
        self.result: tuple[int, bytes, bytes] | None = None
        self.timed_out = False   # the server ended the command at its timeout
        self.error: HostError | None = None


class Served:
    """One server on one host for one Python; thread-safe: any number of commands at once."""

    def __init__(self, transport, chan) -> None:
        self.host, self._chan, self._transport = transport.host, chan, transport
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._lock = threading.Lock()        # the waiting table and the channel's writes
        self.ready = threading.Event()
        self.pid: int | None = None            # the server's, on the host
        self.broken: HostError | None = None
        threading.Thread(target=self._read, name=f"served-{self.host}", daemon=True).start()

    @classmethod
    def start(cls, transport, python: str, timeout: float) -> "Served":
        """The server started on ``transport`` (an SSHTransport) and ready; HostError if not."""
        command = shlex.join([python, "-S", "-u", "-c", SERVER])
        served = cls(transport, transport._start(command))
        if not served.ready.wait(timeout) or served.broken:
            served.close()
            raise served.broken or HostError(transport.host, f"the command server did not start within {timeout:g} s",
                                             "Check the host's load and its login shell (`time ssh HOST true`).")
        return served

    def call(self, argv: Sequence[str], *, stdin: bytes | None, timeout: float | None) -> Result:
        command = shlex.join(argv)
        ident, waiting = next(self._ids), _Waiting()
        data = stdin or b""
        header = {"id": ident, "argv": list(argv), "stdin": len(data), "timeout": timeout}
        with self._lock:
            if self.broken:
                raise self.broken
            self._waiting[ident] = waiting
            try:
                self._chan.sendall((json.dumps(header) + "\n").encode() + data)
            except Exception as err:  # noqa: BLE001 - paramiko's and the socket's: the edge maps them
                self._waiting.pop(ident, None)
                raise self._fail(self._transport._lost(err, command))
        # A cut link shows as no "started" within the answer bound, as an exec channel that does
        # not open: the channel is given up (the next command starts another, or finds the host
        # gone) instead of each command waiting out its own, longer, timeout.
        limit = self._transport.options.answer_timeout_s
        if not waiting.started.wait(limit):
            raise self._fail(self._transport._silent(limit, command))
        if not waiting.done.wait(None if timeout is None else timeout + MARGIN_S) or waiting.timed_out:
            self._cancel(ident)
            raise HostError(self.host, f"command timed out after {timeout} s",
                            "Check that the host is not overloaded, then retry.", command=command)
        if waiting.error:
            raise HostError(waiting.error.host, waiting.error.problem, waiting.error.fix, command=command)
        code, out, err = waiting.result
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"), host=self.host,
                      command=command)

    def _cancel(self, ident: int) -> None:
        with self._lock:
            self._waiting.pop(ident, None)
            try:
                self._chan.sendall((json.dumps({"cancel": ident}) + "\n").encode())
            except Exception:  # noqa: BLE001 - broken already: its reader says so
                pass

    def _read(self) -> None:
        try:
            source = self._chan.makefile("rb")
            while True:
                line = source.readline()
                if not line:
                    raise EOFError("the command server's channel closed")
                header = json.loads(line)
                if "ready" in header:
                    self.pid = int(header["ready"])
                    self.ready.set()
                    continue
                if "started" in header:
                    with self._lock:
                        waiting = self._waiting.get(header["started"])
                    if waiting is not None:
                        waiting.started.set()
                    continue
                out, err = source.read(header["out"]), source.read(header["err"])
                with self._lock:
                    waiting = self._waiting.pop(header["id"], None)
                if waiting is not None:
                    waiting.result = (int(header["code"]), out, err)
                    waiting.timed_out = bool(header.get("timed_out"))
                    waiting.done.set()
        except Exception as err:  # noqa: BLE001 - every way a channel ends: each waiter is told
            self._fail(self._transport._lost(err, "the command server"))
        finally:
            self.ready.set()

    def _fail(self, error: HostError) -> HostError:
        with self._lock:
            self.broken = self.broken or error
            waiting, self._waiting = list(self._waiting.values()), {}
        for w in waiting:
            w.error = error
            w.started.set()
            w.done.set()
        return error

    def close(self) -> None:
        try:
            self._chan.close()
        except Exception:  # noqa: BLE001 - already gone
            pass


class ServedPool:
    """An SSHTransport's servers, one per Python, started on first use."""

    def __init__(self, transport) -> None:
        self._transport = transport
        self._servers: dict[str, Served] = {}
        self._refused: dict[str, float] = {}   # python -> when its server would not start
        self._lock = threading.Lock()

    def get(self, python: str, timeout: float) -> Served | None:
        """A ready server for ``python``, or None (use an exec channel) where one will not start."""
        with self._lock:
            served = self._servers.get(python)
            if served is not None and not served.broken:
                return served
            if time.monotonic() - self._refused.get(python, -RETRY_S) < RETRY_S:
                return None
            try:
                served = Served.start(self._transport, python, timeout)
            except HostError:
                self._refused[python] = time.monotonic()
                return None
            self._servers[python] = served
            return served

    def close(self) -> None:
        with self._lock:
            for served in self._servers.values():
                served.close()
            self._servers.clear()
