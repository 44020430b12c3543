"""A real webhook receiver for alert tests: http.server on 127.0.0.1 in a thread.

``answers`` is the status codes it gives, in order (the last repeats); ``hang_s`` makes it hold
each request that long before answering (a receiver that does not answer). ``banner`` makes it
answer with those bytes instead of HTTP (another server on the port: ``SSH-2.0-...``) and hang
up. ``trickle_s`` makes it send its answer one byte every that many seconds: the whole of it
(``trickle="all"``, the status line first) or only the body after a prompt status and headers
(``trickle="body"``). Every body it got is in ``bodies`` (parsed JSON) with its arrival time in
``times``.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, answers=(200,), hang_s: float = 0.0, *, banner: bytes = b"",
                 trickle_s: float = 0.0, trickle: str = "all") -> None:
        self.answers, self.hang_s = list(answers), hang_s
        self.banner, self.trickle_s, self.trickle = banner, trickle_s, trickle
        self.bodies: list[dict] = []
        self.times: list[float] = []
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):   # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code = owner.answers[min(len(owner.bodies), len(owner.answers) - 1)]
                owner.bodies.append(json.loads(data or b"null"))
                owner.times.append(time.monotonic())
                owner.paths.append(self.path)
                if owner.hang_s:
                    time.sleep(owner.hang_s)
                self.close_connection = True
                head = f"HTTP/1.1 {code} OK\r\nContent-Length: 200\r\nConnection: close\r\n\r\n".encode()
                try:
                    if owner.banner:
                        self.wfile.write(owner.banner)
                    elif owner.trickle_s:
                        slow = head + b"x" * 200 if owner.trickle == "all" else b"x" * 200
                        if owner.trickle == "body":
                            self.wfile.write(head)
                        for i in range(len(slow)):
                            self.wfile.write(slow[i:i + 1])
                            self.wfile.flush()
                            time.sleep(owner.trickle_s)
                    else:
                        self.send_response(code)
                        self.end_headers()
                        self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the sender gave up waiting (hang_s, trickle_s): its deadline is the point

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/SECRET-TOKEN"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count: int, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.bodies

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
