"""Bounded cluster start-up: say which peers a worker waits for, and give up with that reason.

Two checks, for what TF 2.21 does (docs/facts.md #12):

1. Names first, in this process: a peer whose address does not resolve here never will by
   waiting. Strategy creation may even succeed (peers register with the chief, not with each
   other) and the first collective then fails as if a peer had died. So every peer's name must
   resolve before the strategy is made; after ``startup_timeout_s`` it raises ``StartupError``.
2. While the strategy is made: MultiWorkerMirroredStrategy blocks in its constructor until every
   task has joined, silently, and holds Python's GIL meanwhile (a watcher thread never ran), so
   the watcher is a child process. It dials every peer once a second and logs what it sees
   ("waiting for worker-1 at 10.0.0.7:23456: connection refused"). A peer that gives no answer
   (a firewall, a wrong address) past ``startup_timeout_s``, or refuses connections past
   ``REFUSED_FACTOR`` times that (a peer still loading TensorFlow on a busy host refuses too;
   one that crashed fails its own task anyway), ends the worker: the watcher prints the failure
   line (``STARTUP_FAILED``, read by ``backend.diagnosis.diagnose``) and kills it (KILL: TensorFlow catches
   TERM). Once every peer answers, TensorFlow is left to finish; the worker ends the watch by
   closing the watcher's stdin. Standard library only.
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

from . import entry
from dataclasses import dataclass

STARTUP_FAILED = "cluster start-up failed"
UNRESOLVED = "name does not resolve"
REFUSED = "connection refused"
REFUSED_FACTOR = 4       # see the module docstring: refused is often "not started yet"
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
        return f"{REFUSED} (not started yet, or nothing listens there)"
    except (socket.timeout, TimeoutError):
        return f"no answer within {timeout:.0f} s (a firewall, or a wrong address)"
    except OSError as err:
        return err.strerror or str(err)


def describe(waiting: dict[Peer, str]) -> str:
    return "; ".join(f"waiting for {p.name} at {p.address}: {why}" for p, why in waiting.items())


class StartupError(Exception):
    """A peer's name still does not resolve after startup_timeout_s."""


def resolve_names(me: str, peer_list: list[Peer], timeout_s: float, *, interval_s: float = 1.0) -> None:
    """Wait until every peer's name resolves here; raise StartupError with them after the timeout."""
    start, said_at = time.monotonic(), None
    while True:
        unresolved = {}
        for p in peer_list:
            try:
                socket.getaddrinfo(p.host_port[0], p.host_port[1], type=socket.SOCK_STREAM)
            except socket.gaierror as err:
                unresolved[p] = f"{UNRESOLVED} on this host ({err.strerror})"
        elapsed = time.monotonic() - start
        if not unresolved:
            return
        if elapsed >= timeout_s:
            raise StartupError(f"{STARTUP_FAILED} after {timeout_s:g} s (startup_timeout_s): {describe(unresolved)}")
        if said_at is None or elapsed - said_at >= REPORT_EVERY_S:
            print(f"[{me}] start-up {elapsed:.0f} s: {describe(unresolved)}", flush=True)
            said_at = elapsed
        time.sleep(interval_s)


def _overdue(waiting: dict[Peer, str], elapsed: float, timeout_s: float) -> dict[Peer, str]:
    return {p: why for p, why in waiting.items()
            if elapsed >= timeout_s * (REFUSED_FACTOR if why.startswith(REFUSED) else 1)}


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
        overdue = _overdue(waiting, elapsed, timeout_s)
        if overdue and not done(0):
            print(f"[{me}] HARNESS FAILED: {STARTUP_FAILED} after {elapsed:.0f} s "
                  f"(startup_timeout_s {timeout_s:g}): {describe(overdue)}", flush=True)
            os.kill(parent, signal.SIGKILL)
            return


def _stdin_closed(timeout: float) -> bool:
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    return bool(ready) and not sys.stdin.buffer.read1(1)


@contextmanager
def bounded(me: str, timeout_s: float, environ=os.environ):
    """Check the peers' names, then run the block (strategy creation) under a watcher process."""
    peer_list = peers(json.loads(environ.get("TF_CONFIG") or "{}"), me)
    if not peer_list:
        yield
        return
    resolve_names(me, peer_list, timeout_s)
    args = entry.argv("startup", "--me", me, "--timeout", str(timeout_s), "--parent", str(os.getpid()),
                      "--peers", json.dumps([[p.name, p.address] for p in peer_list]))
    child = subprocess.Popen(args, stdin=subprocess.PIPE, env=entry.env())   # stdout, stderr: the task's log
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
