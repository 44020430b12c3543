"""The one transport protocol every host adapter speaks.

Commands are argument lists, never strings: the SSH adapter quotes every element with
``shlex.quote`` before the remote shell sees it, so no field a user typed is ever run.
Relative remote paths resolve against the user's home directory on every adapter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Protocol, Sequence


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Stream(Protocol):
    """A long-running remote command whose stdout is read line by line (the watch agent)."""

    stdout: IO[bytes]

    def close(self) -> None:
        """Stop the remote command and release the channel or pipe."""

    def alive(self) -> bool:
        """False once the command has exited or the connection broke."""


class Transport(Protocol):
    host: str  # what messages call this host: its name as the user typed it

    def run(self, argv: Sequence[str], *, timeout: float | None = 60, stdin: bytes | None = None) -> Result:
        """Run a command to completion and return its exit code and output."""

    def stream(self, argv: Sequence[str]) -> Stream:
        """Start a command whose stdout is read as it comes."""

    def put(self, local_path: str, remote_path: str) -> None:
        """Copy one local file to the host, creating parent folders."""

    def get(self, remote_path: str, local_path: str) -> None:
        """Copy one file from the host."""

    def close(self) -> None:
        """Release the connection."""
