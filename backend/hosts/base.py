"""The one transport protocol every host adapter speaks.

Commands are argument lists, never strings: the SSH adapter quotes every element with
``shlex.quote`` before the remote shell sees it, so no field a user typed is ever run.
Relative remote paths resolve against the user's home directory on every adapter.

The edge: every adapter turns its own I/O failures (socket errors, paramiko's exceptions, a pipe
that broke, a timeout) into ``HostError`` naming the host; nothing else leaves a transport.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import IO, Iterator, Protocol, Sequence

from backend.errors import HostError


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str
    host: str = ""      # the transport's host: errors built from a result name it
    command: str = ""   # as the host's shell saw it

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self, problem: str, fix: str) -> "Result":
        """This result, or a ``HostError`` with its host, command, exit code and stderr tail."""
        if not self.ok:
            raise HostError(self.host, problem, fix, command=self.command, exit_code=self.exit_code,
                            stderr_tail=self.stderr)
        return self


# One line of a stream: our own agent's lines stay under 8 KiB (log lines are cut at 4 KiB before
# they travel), so a longer line comes from something else on the host; without a bound a line
# with no newline would grow in memory until the console fell over.
MAX_LINE_BYTES = 1 << 20


class Lines:
    """A stream's stdout, line by line (each at most ``MAX_LINE_BYTES``, the rest cut with a note), remembering when data last came (``last_data``).

    ``failures``: the adapter's I/O exceptions; each becomes a ``HostError`` naming the host
    (a read that waited longer than the stream's idle timeout included).
    """

    def __init__(self, host: str, raw: IO[bytes], failures: tuple[type[BaseException], ...]) -> None:
        self.host, self._raw, self._failures = host, raw, failures
        self.last_data: float | None = None   # time.time() of the last line read

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self._guarded(self._raw.readline, MAX_LINE_BYTES)
        if not line:
            raise StopIteration
        if len(line) >= MAX_LINE_BYTES and not line.endswith(b"\n"):
            line += f"... [cut {self._skip_line()} bytes]\n".encode()
        self.last_data = time.time()
        return line

    def _skip_line(self) -> int:
        """Read and drop the rest of an over-long line; how many bytes were dropped."""
        dropped = 0
        while True:
            part = self._guarded(self._raw.readline, MAX_LINE_BYTES)
            dropped += len(part)
            if not part or part.endswith(b"\n"):
                return dropped - (1 if part.endswith(b"\n") else 0)

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes (a block that follows its header line), or ``HostError`` when
        the stream ends or breaks first."""
        parts, left = [], size
        while left:
            part = self._guarded(self._raw.read, left)
            if not part:
                raise HostError(self.host, f"the stream ended inside a {size}-byte block",
                                "The connection may be cut; it is opened again.")
            parts.append(part)
            left -= len(part)
        self.last_data = time.time()
        return b"".join(parts)

    def _guarded(self, read, *args) -> bytes:
        try:
            return read(*args)
        except TimeoutError:
            raise HostError(self.host, "no data from the remote command within its idle timeout",
                            "The connection may be cut; it is opened again.") from None
        except self._failures as err:
            raise HostError(self.host, f"the stream broke: {type(err).__name__}: {err}",
                            "The connection may be cut; it is opened again.") from None

    def close(self) -> None:
        try:
            self._raw.close()
        except (OSError, *self._failures):
            pass   # already broken: nothing left to release


class Stream(Protocol):
    """A long-running remote command whose stdout is read line by line (the watch agent)."""

    stdout: Lines

    def close(self) -> None:
        """Stop the remote command and release the channel or pipe."""

    def alive(self) -> bool:
        """False once the command has exited or the connection broke."""


class Transport(Protocol):
    host: str  # what messages call this host: its name as the user typed it

    def run(self, argv: Sequence[str], *, timeout: float | None = 60, stdin: bytes | None = None) -> Result:
        """Run a command to completion and return its exit code and output."""

    def stream(self, argv: Sequence[str], *, idle_timeout: float | None = None) -> Stream:
        """Start a command whose stdout is read as it comes. A read that waits longer than
        ``idle_timeout`` seconds raises ``HostError`` (over SSH; a local pipe cannot be cut)."""

    def close(self) -> None:
        """Release the connection."""
