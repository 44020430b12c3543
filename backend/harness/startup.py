"""Bounded cluster start-up: say which peers a worker waits for, and give up with that reason.

MultiWorkerMirroredStrategy blocks in its constructor until every task in TF_CONFIG has joined,
and prints nothing while it waits: a peer whose address does not resolve from this host keeps
every worker silent until some outer timeout. It also holds Python's GIL while it waits (seen on
TF 2.21: a watcher thread never ran), so the watcher is a child process: it dials every peer's
TF_CONFIG address once a second and logs what it sees ("waiting for worker-1 at
10.0.0.7:23456: connection refused"). After ``startup_timeout_s`` with a peer still unreachable
it prints the harness's failure line (``STARTUP_FAILED``, read by ``backend.diagnose``) and kills
the worker (KILL: TensorFlow catches TERM). Once every peer answers, TensorFlow is left to finish
on its own; the worker ends the watch by closing the watcher's stdin. Standard library only.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

STARTUP_FAILED = "cluster start-up failed"
UNRESOLVED = "name does not resolve"
REPORT_EVERY_S = 10.0   # repeat the waiting line this often while nothing changes
QUIET_S = 2.0           # a normal start-up takes a moment: say nothing for this long


@dataclass(frozen=True)
class Peer:
    name: str     # worker-1
    address: str  # host:port as in TF_CONFIG

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host.strip("[]"), int(port)


def peers(tf_config: dict, me: str) -> list[Peer]:
    """Every chief/worker in TF_CONFIG except this task."""
    out = []
    for role in ("chief", "worker"):
        for i, address in enumerate((tf_config.get("cluster") or {}).get(role, [])):
            if f"{role}-{i}" != me:
                out.append(Peer(f"{role}-{i}", address))
    return out


def reach(peer: Peer, timeout: float = 2.0) -> str | None:
    """None when something listens at the peer's address, else why it cannot be reached."""
    host, port = peer.host_port
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        return f"{UNRESOLVED} on this host ({err.strerror})"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except ConnectionRefusedError:
        return "connection refused (not started yet, or nothing listens there)"
    except (socket.timeout, TimeoutError):
        return f"no answer within {timeout:.0f} s (a firewall, or a wrong address)"
    except OSError as err:
        return err.strerror or str(err)


def describe(waiting: dict[Peer, str]) -> str:
    return "; ".join(f"waiting for {p.name} at {p.address}: {why}" for p, why in waiting.items())


def watch(me: str, peer_list: list[Peer], timeout_s: float, *, parent: int, interval_s: float = 1.0,
          done=None) -> None:
    """Probe until ``done()`` (the worker closed our stdin); kill ``parent`` past the timeout."""
    start, said, said_at = time.monotonic(), "", 0.0
    while not done(interval_s):
        waiting = {p: why for p in peer_list if (why := reach(p)) is not None}
        elapsed = time.monotonic() - start
        line = describe(waiting) if waiting else "every peer answers; TensorFlow is still starting"
        if elapsed >= QUIET_S and (line != said or elapsed - said_at >= REPORT_EVERY_S):
            print(f"[{me}] start-up {elapsed:.0f} s: {line}", flush=True)
            said, said_at = line, elapsed
        if waiting and elapsed >= timeout_s and not done(0):
            print(f"[{me}] HARNESS FAILED: {STARTUP_FAILED} after {timeout_s:g} s "
                  f"(startup_timeout_s): {describe(waiting)}", flush=True)
            os.kill(parent, signal.SIGKILL)
            return


def _stdin_closed(timeout: float) -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and not sys.stdin.buffer.read1(1)


@contextmanager
def bounded(me: str, timeout_s: float, environ=os.environ):
    """Run the block (strategy creation) under a watcher process over this task's peers."""
    peer_list = peers(json.loads(environ.get("TF_CONFIG") or "{}"), me)
    if not peer_list:
        yield
        return
    args = [sys.executable, "-S", os.path.abspath(__file__), "--me", me, "--timeout", str(timeout_s),
            "--parent", str(os.getpid()), "--peers", json.dumps([[p.name, p.address] for p in peer_list])]
    child = subprocess.Popen(args, stdin=subprocess.PIPE)   # stdout and stderr: the task's log
    try:
        yield
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv: list[str]) -> None:
    a = dict(zip(argv[0::2], argv[1::2]))
    peer_list = [Peer(name, address) for name, address in json.loads(a["--peers"])]
    watch(a["--me"], peer_list, float(a["--timeout"]), parent=int(a["--parent"]), done=_stdin_closed)


if __name__ == "__main__":
    main(sys.argv[1:])
