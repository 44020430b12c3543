"""The host side of a served channel: one long-lived process per host that runs the console's
short commands, so a login (the login shell and its startup files) is paid once per host, not
once per command. Standard library only; the console sends this file's text as
``python -S -u -c TEXT`` (backend/hosts/served.py) over one SSH channel and keeps it open.

The protocol, one frame each way per command (every header is one JSON line, followed by raw bytes):

    console -> host   {"id": 7, "argv": [...], "stdin": <bytes that follow>, "timeout": 60}\\n<stdin>
                      {"cancel": 7}\\n                       (the console gave up waiting)
    host -> console   {"ready": <pid>}\\n                    (once, first)
                      {"started": 7}\\n                     (the command arrived; it runs)
                      {"id": 7, "code": 0, "out": <n>, "err": <m>, "timed_out": false}\\n<n bytes><m bytes>

Each command runs as its own process (``argv`` exactly, no shell: the same argument list the
console would have sent over an exec channel, in the same folder and environment), on a thread
of its own, so a slow command holds up no other. When the console goes (its stdin ends: the
connection closed or was cut), every command still running is killed and the server exits:
nothing is left on the host.
"""
import json
import os
import subprocess
import sys
import threading

_write = threading.Lock()
_running = {}            # id -> Popen
_running_lock = threading.Lock()


def _send(header, *blocks):
    data = (json.dumps(header) + "\n").encode() + b"".join(blocks)
    with _write:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _run(request, stdin):
    ident = request["id"]
    try:
        proc = subprocess.Popen(request["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as err:   # as a shell says it: 127 for a program that is not there
        code = 127 if isinstance(err, FileNotFoundError) else 126
        _send({"id": ident, "code": code, "out": 0, "err": len(str(err).encode())}, str(err).encode())
        return
    with _running_lock:
        _running[ident] = proc
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=request.get("timeout"))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    finally:
        with _running_lock:
            _running.pop(ident, None)
    _send({"id": ident, "code": proc.returncode, "out": len(out), "err": len(err), "timed_out": timed_out},
          out, err)


def _cancel(ident):
    with _running_lock:
        proc = _running.get(ident)
    if proc is not None:
        proc.kill()


def main():
    source = sys.stdin.buffer
    _send({"ready": os.getpid()})
    while True:
        line = source.readline()
        if not line:
            break   # the console is gone
        request = json.loads(line)
        if "cancel" in request:
            _cancel(request["cancel"])
            continue
        stdin = source.read(request.get("stdin", 0)) if request.get("stdin") else b""
        _send({"started": request["id"]})   # as an exec channel's start: the console knows it arrived
        threading.Thread(target=_run, args=(request, stdin), daemon=True).start()
    with _running_lock:
        for proc in _running.values():
            proc.kill()


if __name__ == "__main__":
    main()
