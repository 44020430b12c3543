"""Local adapter: commands are subprocesses of this machine, run from the user's home folder."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Sequence

from backend.errors import HostError
from backend.hosts.base import Result


def _home_path(path: str) -> str:
    return os.path.join(os.path.expanduser("~"), path)  # an absolute path stays as it is


class LocalStream:
    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc
        self.stdout = proc.stdout

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
        for pipe in (self._proc.stdin, self._proc.stdout):
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
        except FileNotFoundError:
            raise HostError(self.host, f"command not found: {argv[0]}",
                            "Check the task's Python path.", command=" ".join(argv)) from None
        except subprocess.TimeoutExpired:
            raise HostError(self.host, f"command timed out after {timeout} s",
                            "Check that the host is not overloaded, then retry.",
                            command=" ".join(argv)) from None
        return Result(proc.returncode, proc.stdout.decode(errors="replace"),
                      proc.stderr.decode(errors="replace"))

    def stream(self, argv: Sequence[str]) -> LocalStream:
        # stdin stays open: the agent exits when it closes, like over an SSH channel.
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=os.path.expanduser("~"))
        return LocalStream(proc)

    def put(self, local_path: str, remote_path: str) -> None:
        target = _home_path(remote_path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        shutil.copyfile(local_path, target)

    def get(self, remote_path: str, local_path: str) -> None:
        try:
            shutil.copyfile(_home_path(remote_path), local_path)
        except FileNotFoundError:
            raise HostError(self.host, f"no file {remote_path}",
                            "Check that the run directory exists on this host.") from None

    def close(self) -> None:
        pass
