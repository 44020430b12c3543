"""Open one transport per distinct host connection and run work on many hosts in parallel.

Like Fabric's Group: ``parallel`` returns name -> result or error, and the caller raises one
``MultiHostError`` carrying them all.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from backend.hosts.base import Transport
from backend.hosts.local import LocalTransport
from backend.hosts.ssh import SSHOptions, SSHTransport
from backend.config.spec import TaskSpec, TransportKind

T = TypeVar("T")
R = TypeVar("R")
MAX_PARALLEL = 64  # threads mostly wait on the network; 64 keeps hundreds of hosts quick


def connection_key(task: TaskSpec) -> tuple:
    """Tasks that share this key share one SSH connection (several tasks on one host)."""
    return (task.transport, task.host, task.ssh_port, task.user, task.identity_file, task.jump_host)


def make_transport(task: TaskSpec, options: SSHOptions) -> Transport:
    """A new, unshared transport for one task's host."""
    if task.transport == TransportKind.LOCAL:
        return LocalTransport(task.host)
    return SSHTransport(task.host, port=task.ssh_port, user=task.user,
                        identity_file=task.identity_file, jump_host=task.jump_host, options=options)


class Pool:
    def __init__(self, options: SSHOptions | None = None) -> None:
        self.options = options or SSHOptions()
        self._open: dict[tuple, Transport] = {}

    def transport(self, task: TaskSpec) -> Transport:
        key = connection_key(task)
        if key not in self._open:
            self._open[key] = make_transport(task, self.options)
        return self._open[key]

    def close(self) -> None:
        for t in self._open.values():
            t.close()
        self._open.clear()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parallel(fn: Callable[[T], R], items: Iterable[tuple[str, T]]) -> dict[str, R | Exception]:
    """Run ``fn`` on every item at once; name -> result, or the exception it raised."""
    items = list(items)
    if not items:
        return {}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(items))) as ex:
        futures = {name: ex.submit(fn, item) for name, item in items}
    out: dict[str, R | Exception] = {}
    for name, fut in futures.items():
        err = fut.exception()
        out[name] = err if err is not None else fut.result()
    return out


def failures(results: dict[str, object]) -> dict[str, Exception]:
    return {name: r for name, r in results.items() if isinstance(r, Exception)}
