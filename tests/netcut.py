"""A TCP proxy that can cut the network silently: it stops forwarding but closes nothing.

That is what a pulled cable or a dead router looks like from the client: no reset, no FIN, the
connection just stops answering. Put it in front of a real sshd and dial the proxy's port.
Threads only; each connection has one pump per direction.
"""
from __future__ import annotations

import select
import socket
import threading


class CutProxy:
    def __init__(self, target: tuple[str, int], address: str = "127.0.0.1") -> None:
        self.target = target
        self._listener = socket.create_server((address, 0))
        self.address, self.port = self._listener.getsockname()[:2]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="cut-proxy").start()

    def cut(self) -> None:
        """Stop forwarding in both directions; every socket stays open."""
        self._flowing.clear()

    def heal(self) -> None:
        """Forward again, held bytes first."""
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            for s in [self._listener, *self._sockets]:
                try:
                    s.close()
                except OSError:
                    pass

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return   # closed
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if not self._flowing.wait(0.2):
                    continue   # cut: read nothing, so the sender's buffers fill as on a dead link
                if not select.select([src], [], [], 0.2)[0]:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()   # a cut that began meanwhile holds these bytes too
                dst.sendall(data)
        except (OSError, ValueError):   # ValueError: select() on a socket close() just closed
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
