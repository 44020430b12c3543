"""The host-side command line: every action the console takes on a host, one subcommand each.

The console runs ``python -S RUN/harness/hostctl.py SUBCOMMAND --run RUN ...`` (``backend.hosts.remote``
is its only client). Standard library only, so ``-S`` skips site-packages: it starts fast and works
before and without the job's packages. ``export`` loads TensorFlow, so it runs ``export.py`` in a
child process (the same Python, with site-packages) and answers with that child's JSON answer.

The protocol, the same for every subcommand:

- stdout: ONE JSON object (its last line), the answer; exit 0.
- exit ``FAILED`` (3): a failure this command understands (a refused checkpoint hold, a missing
  file, a full disk, a failed export): stdout is ``{"error": "...", "missing": bool}``.
- exit 2: argparse's usage error, or Python's own "can't open file" (nothing installed here).
- ``follow`` is the one stream: it writes the file's bytes as they are appended (``tail -F``) until
  the client closes it; a refusal before its first byte is answered as above.

Paths given to ``read``, ``write``, ``follow``, ``--dir`` and ``--job`` are relative to the run
directory and stay inside it.
"""
from __future__ import annotations

import argparse
import base64
import errno
import json
import os
import re
import subprocess
import sys
import tarfile
import time

from . import entry, layout, pip_install, project_cache
from . import requests_dir
from . import retention
from . import spawn
from . import stackdump
from . import sweep

FAILED = 3
READ_LIMIT = 16 << 20     # bytes per read answer: one call stays short on a slow link
PROGRESS_WINDOW = 1 << 16  # the last metrics line is looked for in this many trailing bytes
FOLLOW_POLL_S = 0.2       # how often ``follow`` looks for new bytes (tail -F's default is 1 s)
MAX_FILES = 10_000          # files one ``files`` answer lists (a TensorBoard folder holds a few)
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
    """Each task's processes, found by group and by mark (``sweep.py``), ended and looked for again."""
    groups = {}
    for item in a.group:   # TASK=PGID from the run's record: used where this host lost its own
        task, _, pgid = item.partition("=")
        groups[task] = _int(pgid, f"--group {task}")
    return sweep.stop(a.run, a.task, a.grace, groups)


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


def cmd_project(a) -> dict:
    """The run's project into RUN/job/ from this host's cache (project_cache.py); the tar on
    stdin when the console sends it. ``{"cached": bool}``; refused as missing when not cached
    and nothing came."""
    try:
        return {"cached": project_cache.use(a.run, a.hash, sys.stdin.buffer.read(),
                                            os.path.join(a.run, layout.JOB))}
    except project_cache.NotCached:
        raise Refused(f"project {a.hash[:12]} is not in this host's cache", missing=True) from None
    except (ValueError, tarfile.TarError) as err:
        raise Refused(f"project {a.hash[:12]}: {err}") from None
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = os.path.dirname(os.path.dirname(os.path.abspath(a.run)))
        raise Refused(f"no room for the project on this host's disk under {where} "
                      f"({err.strerror}); nothing of it was kept. Free space there (`df -h {where}`), "
                      "or give the task another workdir") from None


def cmd_pip(a) -> dict:
    """The project's requirements into this Python (pip_install.py): the job asked for it."""
    try:
        return pip_install.install(a.run)
    except pip_install.PipFailed as err:
        raise Refused(str(err)) from None


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


def cmd_liveness(a) -> dict:
    """Each task's signs of life (``spawn.signs_of_life``): state, live processes, CPU seconds,
    log size; the keeper judges a stall by them, not by missing metrics alone."""
    return {task: spawn.signs_of_life(a.run, task) for task in a.task}


def cmd_request_save(a) -> dict:
    """Leave a save-now request for the chief (``requests_dir.py``); written whole, then renamed."""
    folder = os.path.join(a.run, layout.REQUESTS)
    os.makedirs(folder, exist_ok=True)
    kind = requests_dir.STOP if a.stop else "save-"   # save-stop-: save, then every worker exits
    name = f"{kind}{int(time.time() * 1000)}-{os.getpid()}.json"
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
            answer = json.load(fh)
        if isinstance(answer, dict) and answer.get("error"):
            # saved, but at a step the checkpoint list will never show (requests_dir.mark_failed)
            raise Refused(f"the job saved at step {answer.get('saved_step')} but the checkpoint "
                          f"list will never show it: {answer['error']}")
        return {"step": int(answer["step"])}
    except (FileNotFoundError, ValueError, KeyError, TypeError):
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


def cmd_files(a) -> dict:
    """Every plain file under a run folder (``--dir``), with its size: what a copy needs to fetch
    only what is new (TensorBoard's event files grow by appending). Links are left out: a copy
    takes the run's own files, never what a link points to."""
    top = inside(a.run, a.dir)
    if not os.path.isdir(top):
        raise Refused(f"no folder {a.dir} in {a.run}", missing=True)
    out = []
    for folder, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path) or name.endswith(".part"):
                continue
            out.append({"path": os.path.relpath(path, top), "size": os.path.getsize(path)})
            if len(out) >= MAX_FILES:
                return {"files": out, "cut": True}
    return {"files": out, "cut": False}


def cmd_follow(a) -> None:
    """The file's bytes from its start, then as they are appended, like ``tail -n +1 -F``: a file
    not there yet is waited for, one replaced or cut short is read again from its start."""
    path = inside(a.run, a.path)
    try:
        _follow(path, sys.stdout.buffer)
    except BrokenPipeError:   # the client closed the stream: the normal end
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no error at exit's flush
    return None


def _follow(path: str, out) -> None:
    fh, ident, pos = None, None, 0
    while True:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and (fh is None or (st.st_dev, st.st_ino) != ident or st.st_size < pos):
            if fh is not None:
                fh.close()
            fh, ident, pos = open(path, "rb"), (st.st_dev, st.st_ino), 0
        data = fh.read(READ_LIMIT) if fh is not None else b""
        if data:
            out.write(data)
            out.flush()   # a closed channel shows here: BrokenPipeError ends the stream
            pos += len(data)
        else:
            time.sleep(FOLLOW_POLL_S)


# -- checkpoints (``retention.py``): --dir is the task's checkpoint folder, run-relative ----------
def _held(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except retention.HoldError as err:
        raise Refused(str(err)) from None


def cmd_ckpt_list(a) -> dict:
    """Checkpoints users may pick (retention keeps them), each with the purposes holding it."""
    return {"checkpoints": retention.listed(inside(a.run, a.dir))}


def cmd_ckpt_abandoned(a) -> dict:
    """Checkpoints that restores moved aside."""
    return {"checkpoints": retention.list_abandoned(inside(a.run, a.dir))}


def cmd_ckpt_hold(a) -> dict:
    """Hold a step (``latest``: the newest, resolved now): {"hold", "step", ...}."""
    step = None if a.step == "latest" else _int(a.step, "--step")
    return _held(retention.pin, inside(a.run, a.dir), step, purpose=a.purpose, ttl_s=a.ttl)


def cmd_ckpt_release(a) -> dict:
    return {"released": _held(retention.release, inside(a.run, a.dir), a.hold)}


def cmd_ckpt_abandon(a) -> dict:
    """Move checkpoints newer than ``--after`` aside (a restore), but never the one held."""
    return {"moved": _held(retention.abandon, inside(a.run, a.dir), a.after, a.tag, keep_hold=a.keep_hold)}


def cmd_resumed(a) -> dict:
    """``resumed``: task -> step for the tasks that restored in ``--attempt`` (session.py writes
    it); ``ended``: tasks whose process has exited (spawn.py clears that file at each start)."""
    out: dict = {"resumed": {}, "ended": []}
    for task in a.task:
        if os.path.exists(layout.task_file(a.run, task, "exit")):
            out["ended"].append(task)
        try:
            with open(layout.task_file(a.run, task, "resumed")) as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            continue
        if info.get("attempt") == a.attempt:
            out["resumed"][task] = info["step"]
    return out


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Refused(f"{what} {text!r} is not a number") from None


def cmd_export(a) -> dict:
    """Export a checkpoint in a child process: it loads TensorFlow, which ``-S`` leaves out, and
    its answer (the last stdout line, this protocol's JSON) becomes this one. Its stderr (a
    traceback) passes through, for the client's stderr tail."""
    argv = entry.argv("export", "--run-dir", a.run, "--formats", a.formats, site=True)
    # No job module (a command job): export.py builds the model from checkpoints/model.json.
    argv += ["--job", inside(a.run, a.job)] if a.job else []
    argv += (["--step", str(a.step)] if a.step is not None else []) + (["--name", a.name] if a.name else [])
    return _tf_child(argv, "export")


def cmd_ckpt_verify(a) -> dict:
    """Read ``--step``s of a checkpoint folder, newest first, with TensorFlow's checkpoint reader
    until one reads whole (export.py ``--check``, a child: ``-S`` leaves TensorFlow out here):
    {"good": step or None, "damaged": {step: why}}. A resume asks before it picks a step."""
    argv = entry.argv("export", "--run-dir", a.run, "--check", inside(a.run, a.dir),
                      "--steps", ",".join(map(str, a.step)), site=True)
    return _tf_child(argv, "checkpoint check")


def _tf_child(argv: list, what: str) -> dict:
    """Run export.py; its answer (the last stdout line, this protocol's JSON) becomes this one."""
    child = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=entry.env())
    answer = last_json(child.stdout.decode(errors="replace"))
    if child.returncode == 0 and answer is not None and "error" not in answer:
        return answer
    raise Refused((answer or {}).get("error") or f"{what} failed (exit {child.returncode})")


def last_json(text: str) -> dict | None:
    """The last stdout line that is a JSON object (a job may print its own lines before it)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


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
    s = add("stop", cmd_stop, "stop tasks and all they started: INT and TERM, then KILL, then look again")
    s.add_argument("--task", action="append", required=True)
    s.add_argument("--group", action="append", default=[], metavar="TASK=PGID",
                   help="a task's process group as the console recorded it")
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
    add("liveness", cmd_liveness, "each task's processes, CPU seconds and log size").add_argument(
        "--task", action="append", required=True)
    add("request-save", cmd_request_save, "ask the chief to save at its next sync point").add_argument(
        "--stop", action="store_true", help="then every worker exits (preempt.EXIT_CODE)")
    add("save-done", cmd_save_done, "the step a save request was saved at").add_argument("--name", required=True)
    add("exports", cmd_exports, "finished exports' result.json")
    add("files", cmd_files, "every file under a run folder, with its size").add_argument("--dir", required=True)
    add("follow", cmd_follow, "a file's bytes as they are written (a stream, like tail -F)").add_argument(
        "--path", required=True)
    for name, fn, help in (("ckpt-list", cmd_ckpt_list, "checkpoints users may pick, with their holds"),
                           ("ckpt-abandoned", cmd_ckpt_abandoned, "checkpoints moved aside by restores")):
        add(name, fn, help).add_argument("--dir", required=True, help="the checkpoint folder")
    s = add("ckpt-hold", cmd_ckpt_hold, "hold a checkpoint step: retention keeps it until released")
    s.add_argument("--dir", required=True)
    s.add_argument("--step", required=True, help="a step, or latest")
    s.add_argument("--purpose", required=True)
    s.add_argument("--ttl", type=float, default=None, help="seconds; none: held until released")
    s = add("ckpt-release", cmd_ckpt_release, "end a hold")
    s.add_argument("--dir", required=True)
    s.add_argument("--hold", required=True)
    s = add("ckpt-abandon", cmd_ckpt_abandon, "move checkpoints newer than a step aside")
    s.add_argument("--dir", required=True)
    s.add_argument("--after", type=int, required=True)
    s.add_argument("--tag", required=True)
    s.add_argument("--keep-hold", default=None)
    add("pip", cmd_pip, "pip install the project's requirements into this Python (pip_install: true)")
    s = add("project", cmd_project, "the run's project folder from this host's cache, or from stdin")
    s.add_argument("--hash", required=True, help="the project tar's sha256")
    s = add("ckpt-verify", cmd_ckpt_verify, "read steps with TensorFlow's reader until one reads whole")
    s.add_argument("--dir", required=True)
    s.add_argument("--step", type=int, action="append", required=True)
    s = add("resumed", cmd_resumed, "the step each task resumed from in an attempt")
    s.add_argument("--attempt", type=int, required=True)
    s.add_argument("--task", action="append", default=[])
    s = add("export", cmd_export, "export a checkpoint and verify it in a fresh process (export.py)")
    s.add_argument("--job", default=None,
                   help="the job module, run-relative (none: the model.json a fit job's callback wrote)")
    s.add_argument("--step", type=int, default=None, help="default: the newest complete checkpoint")
    s.add_argument("--name", default=None)
    s.add_argument("--formats", default="savedmodel,keras")
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
        if out is None:   # a stream (follow): its bytes were the answer
            return 0
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
