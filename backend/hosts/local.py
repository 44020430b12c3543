"""Local adapter: commands are subprocesses of this machine, run from the user's home folder."""
from __future__ import annotations

import os
import shlex
import subprocess
from typing import Sequence

from backend.errors import HostError
from backend.hosts.base import Lines, Result


class LocalStream:
    def __init__(self, host: str, proc: subprocess.Popen) -> None:
        self._proc = proc
        self.stdout = Lines(host, proc.stdout, (OSError, ValueError))  # ValueError: read after close

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for pipe in (self._proc.stdin, self.stdout):
            if pipe:
                pipe.close()


class LocalTransport:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host

    def run(self, argv: Sequence[str], *, timeout: float | None = 60,
            stdin: bytes | None = None) -> Result:
        try:
            proc = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                                  timeout=timeout, cwd=os.path.expanduser("~"))
        except FileNotFoundError:   # answered as a shell over SSH answers it: exit 127
            return Result(127, "", f"{argv[0]}: command not found\n", host=self.host, command=shlex.join(argv))
        except subprocess.TimeoutExpired:
            raise HostError(self.host, f"command timed out after {timeout} s",
                            "Check that the host is not overloaded, then retry.",
                            command=shlex.join(argv)) from None
        except OSError as err:
            raise HostError(self.host, f"cannot run {argv[0]}: {err}", "Check the path and its permissions.",
                            command=shlex.join(argv)) from None
        return Result(proc.returncode, proc.stdout.decode(errors="replace"),
                      proc.stderr.decode(errors="replace"), host=self.host, command=shlex.join(argv))

    def stream(self, argv: Sequence[str], *, idle_timeout: float | None = None) -> LocalStream:
        # stdin stays open: the agent exits when it closes, like over an SSH channel. A local
        # pipe cannot be cut by a network, so idle_timeout does not apply here.
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, cwd=os.path.expanduser("~"))
        except OSError as err:
            raise HostError(self.host, f"cannot run {argv[0]}: {err}", "Check the task's Python path.",
                            command=shlex.join(argv)) from None
        return LocalStream(self.host, proc)

    def close(self) -> None:
        pass
