"""hostctl's file commands: read, write, follow, files, progress, project, pip, exports (declared
in ``host_commands.py``). Paths given to ``read``, ``write``, ``follow`` and ``--dir`` are relative
to the run directory and stay inside it. Each takes the parsed arguments and returns the JSON
answer; ``follow`` writes a stream instead.
"""
from __future__ import annotations

import base64
import errno
import json
import os
import sys
import tarfile
import time

from . import layout, pip_install, project_cache
from .host_commands import READ_LIMIT, Refused, inside

PROGRESS_WINDOW = 1 << 16  # the last metrics line is looked for in this many trailing bytes
FOLLOW_POLL_S = 0.2       # how often ``follow`` looks for new bytes (tail -F's default is 1 s)
MAX_FILES = 10_000          # files one ``files`` answer lists (a TensorBoard folder holds a few)


def read(a) -> dict:
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


def write(a) -> dict:
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


def follow(a) -> None:
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


def files(a) -> dict:
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


def progress(a) -> dict:
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


def project(a) -> dict:
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


def pip(a) -> dict:
    """The project's requirements into this Python (pip_install.py): the job asked for it."""
    try:
        return pip_install.install(a.run)
    except pip_install.PipFailed as err:
        raise Refused(str(err)) from None


def exports(a) -> dict:
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
