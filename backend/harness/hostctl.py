"""The host-side command line: every action the console takes on a host, one subcommand each.

The console runs ``python -S RUN/harness/hostctl.py SUBCOMMAND --run RUN ...`` (``backend.hosts.remote``
is its client). Standard library only, so ``-S`` skips site-packages: it starts fast and works
before and without the job's packages. Each subcommand prints ONE JSON object on stdout and exits
0; a failure it understands prints ``{"error": ..., "missing": bool}`` and exits ``FAILED``.
Exit 2 is argparse's (a usage error) or Python's own "can't open file" (nothing installed here).

Paths given to ``read`` and ``write`` are relative to the run directory and stay inside it.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time

import layout
import spawn
import stackdump

FAILED = 3
READ_LIMIT = 16 << 20     # bytes per read answer: one call stays short on a slow link
PROGRESS_WINDOW = 1 << 16  # the last metrics line is looked for in this many trailing bytes
SAVE_NAME = re.compile(r"^save-[A-Za-z0-9_-]{1,80}\.json$")


class Refused(Exception):
    """A failure this command understands: reported as JSON, not as a traceback."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def inside(run: str, rel: str) -> str:
    """``rel`` under the run directory; refuses absolute paths and ``..``."""
    if not rel or os.path.isabs(rel) or ".." in rel.split("/"):
        raise Refused(f"path {rel!r} is not inside the run directory")
    return os.path.join(run, rel)


# -- subcommands: each takes the parsed arguments and returns the JSON answer ----------------
def cmd_start(a) -> dict:
    tasks = json.loads(sys.stdin.read())["tasks"]
    return spawn.start_many(a.run, tasks, a.wait, a.settle)


def cmd_status(a) -> dict:
    return {task: spawn.status_one(a.run, task) for task in a.task}


def cmd_stop(a) -> dict:
    return spawn.stop(a.run, a.task, a.grace)


def cmd_stacks(a) -> dict:
    """Each running task's Python stacks (``stackdump.py``), or why there are none."""
    out = {}
    for task in a.task:
        info = spawn.status_one(a.run, task)
        pid = info.get("pid")
        if info["state"] != "running" or not pid:
            out[task] = {"error": f"{task} is {info['state']}, not running"}
        elif not stackdump.catches(pid):
            out[task] = {"error": f"{task} (pid {pid}) has no stack handler: only harness jobs dump stacks"}
        else:
            out[task] = {"pid": pid, "stacks": stackdump.dump(a.run, task, pid, a.wait)}
    return out


def cmd_read(a) -> dict:
    """Bytes of a file: from ``--offset``, or the last ``--tail`` bytes; at most ``--limit``."""
    path = inside(a.run, a.path)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise Refused(f"no file {a.path} in {a.run}", missing=True) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        start = max(0, size - a.tail) if a.tail is not None else min(a.offset, size)
        fh.seek(start)
        data = fh.read(min(a.limit, READ_LIMIT))
    return {"size": size, "offset": start, "data": base64.b64encode(data).decode(),
            "eof": start + len(data) >= size}


def cmd_write(a) -> dict:
    """stdin into ``PATH.part`` at ``--offset``; ``--final`` renames it to PATH (all or nothing).
    ``--private``: the file is 0600 from its creation on, its new folders 0700."""
    path = inside(a.run, a.path)
    part = f"{path}.part"
    os.makedirs(os.path.dirname(path), mode=0o700 if a.private else 0o777, exist_ok=True)
    if not a.offset:   # a fresh file: created with its final mode, so it is never readable by others
        os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if a.private else 0o666))
        if a.private:
            os.chmod(part, 0o600)   # a .part left by an earlier try keeps its own mode otherwise
    with open(part, "r+b") as fh:
        fh.seek(a.offset)
        fh.truncate()
        fh.write(sys.stdin.buffer.read())
        size = fh.tell()
        if a.final:
            fh.flush()
            os.fsync(fh.fileno())
    if a.final:
        os.replace(part, path)
    return {"size": size, "final": a.final}


def cmd_progress(a) -> dict:
    """The chief's metrics.jsonl: its size and its last complete line (None when absent)."""
    path = os.path.join(a.run, layout.METRICS)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return {"size": None, "last": None}
    with fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - PROGRESS_WINDOW))
        tail = fh.read()
    complete = tail[:tail.rfind(b"\n")].rsplit(b"\n", 1)[-1] if b"\n" in tail else b""
    return {"size": size, "last": complete.decode(errors="replace") or None}


def cmd_request_save(a) -> dict:
    """Leave a save-now request for the chief (``requests_dir.py``); written whole, then renamed."""
    folder = os.path.join(a.run, layout.REQUESTS)
    os.makedirs(folder, exist_ok=True)
    name = f"save-{int(time.time() * 1000)}-{os.getpid()}.json"
    tmp = os.path.join(folder, f".{name}.tmp")   # not save-*.json: the chief ignores it
    with open(tmp, "w") as fh:
        fh.write("{}")
    os.replace(tmp, os.path.join(folder, name))
    return {"name": name}


def cmd_save_done(a) -> dict:
    """The step a request was saved at, or None while it waits."""
    if not SAVE_NAME.match(a.name):
        raise Refused(f"{a.name!r} is not a save request name")
    done = os.path.join(a.run, layout.REQUESTS, a.name[:-len(".json")] + ".done")
    try:
        with open(done) as fh:
            return {"step": int(json.load(fh)["step"])}
    except (FileNotFoundError, ValueError, KeyError):
        return {"step": None}   # not answered yet, or its answer is still being renamed in


def cmd_exports(a) -> dict:
    """Every finished export's result.json (an export writes it last), by name."""
    folder = os.path.join(a.run, layout.EXPORTS)
    out = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name, "result.json")
        if name.startswith(".") or not os.path.exists(path):
            continue
        try:
            with open(path) as fh:
                out.append(json.load(fh))
        except ValueError:
            continue
    return {"exports": out}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hostctl.py", description="The console's actions on this host.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, fn, help: str) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help)
        s.add_argument("--run", required=True, help="the run directory on this host")
        s.set_defaults(fn=fn)
        return s

    s = add("start", cmd_start, 'start tasks detached; stdin: {"tasks": [{"task", "argv", "env"}]}')
    s.add_argument("--wait", type=float, default=10.0, help="seconds to wait for each pid")
    s.add_argument("--settle", type=float, default=0.0, help="then this long, to catch early deaths")
    add("status", cmd_status, "each task's state").add_argument("--task", action="append", required=True)
    s = add("stop", cmd_stop, "stop tasks' process groups: INT and TERM, then KILL")
    s.add_argument("--task", action="append", required=True)
    s.add_argument("--grace", type=float, default=spawn.KILL_AFTER_S)
    s = add("stacks", cmd_stacks, "each task's Python stacks (SIGUSR1 to its faulthandler)")
    s.add_argument("--task", action="append", required=True)
    s.add_argument("--wait", type=float, default=5.0, help="seconds to wait for each dump")
    s = add("read", cmd_read, "a file's bytes (base64), by offset or from its end")
    s.add_argument("--path", required=True)
    where = s.add_mutually_exclusive_group()
    where.add_argument("--offset", type=int, default=0)
    where.add_argument("--tail", type=int)
    s.add_argument("--limit", type=int, default=READ_LIMIT)
    s = add("write", cmd_write, "stdin into a file at an offset; --final makes it appear")
    s.add_argument("--path", required=True)
    s.add_argument("--offset", type=int, default=0)
    s.add_argument("--final", action="store_true")
    s.add_argument("--private", action="store_true", help="mode 0600 (the file holds secrets)")
    add("progress", cmd_progress, "size and last line of metrics.jsonl")
    add("request-save", cmd_request_save, "ask the chief to save at its next sync point")
    add("save-done", cmd_save_done, "the step a save request was saved at").add_argument("--name", required=True)
    add("exports", cmd_exports, "finished exports' result.json")
    v = sub.add_parser("supervise", help=argparse.SUPPRESS)   # spawn.start runs it: one per task
    v.add_argument("--run", required=True)
    v.add_argument("--task", required=True)
    v.add_argument("--cwd", default=".")
    v.add_argument("argv", nargs="+")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "supervise":
        return spawn.supervise(a.run, a.task, a.argv, a.cwd)
    try:
        out = a.fn(a)
    except Refused as err:
        print(json.dumps({"error": str(err), "missing": err.missing}))
        return FAILED
    except OSError as err:   # a full disk, a permission: say which file, without a traceback
        print(json.dumps({"error": f"{err.strerror or err}: {err.filename or ''}".strip(": "),
                          "missing": False}))
        return FAILED
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
