"""Client of the host's ``hostctl`` command (``backend.client.harness.hostctl``), its only one: a
function per host command, named as it is (``ckpt_hold`` for ``ckpt-hold``; ``read`` and ``write``
have a few), typed answers, our errors. The arguments each command takes are declared once, in
``host_commands.py``: ``_call`` passes them by keyword and that table makes the argv
(docs/wire-protocol.md).

Every remote action on a run's host goes through here, as plain argv commands: ``install`` makes
the run folder with ``mkdir`` and unpacks the bundle (the package into ``RUN/lib``) with the host's
Python (``unpack.py``, its text passed as ``-c``), then everything else runs
``python -S RUN/lib hostctl SUBCOMMAND --run RUN`` (``layout.host_argv``): tasks, files (read,
write, follow), the chief's save requests, checkpoints (list, hold, release, abandon, resumed) and
export. No SFTP: files travel as hostctl ``read`` and ``write`` calls, so hosts whose sshd has no
SFTP subsystem work (docs/facts.md #14).

The exit codes, read here and nowhere else (hostctl's docstring says what it answers):

- 0: the answer is the JSON object on stdout's last line;
- ``FAILED`` (3): stdout is ``{"error", "missing"}``; raised as ``MissingFile`` (missing) or
  ``Refused`` (anything else: its ``reason`` is the host's text);
- ``NOT_INSTALLED`` (2, "can't open file": no ``RUN/lib``) or ``NO_PYTHON`` (127) with nothing
  on stdout: ``NotInstalled``;
- 1 with Python's "can't find '__main__' module" (``STALE``): a ``RUN/lib`` without our entry;
- anything else: ``HostError`` with the stderr tail.

Every ``HostError`` names the host (a ``Result`` carries it).

Why one file of this size: a short client per host command (25 of them, each a few lines of typed
answer and error), beside the one ``_call`` they all go through: one file to read what the console
asks a host and what it gets back.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from backend.errors import HostError
from backend.client.harness.contract import host_commands, layout
from backend.hosts.base import Result, Stream, Transport

CHUNK = 8 << 20        # bytes per read or write call: a slow link still answers within TIMEOUT_S
TIMEOUT_S = 60.0
UNPACK = (Path(__file__).parent / "unpack.py").read_text()   # run on the host by install
FAILED = host_commands.FAILED   # hostctl's exit code for a failure it reports as JSON
NOT_INSTALLED = 2      # Python's exit code for "can't open file": no RUN/lib in that run directory
NO_PYTHON = 127        # the shell's "command not found"
STALE = "can't find '__main__' module"   # Python's words for a lib/ without our entry (an older copy)


@dataclass(frozen=True)
class Host:
    """One run directory on one host: where hostctl lives and what runs it."""
    transport: Transport
    python: str
    run_dir: str

    def __post_init__(self) -> None:
        # The run folder is an argument of python, mkdir and tar: never one they take for an option.
        object.__setattr__(self, "run_dir", layout.path_arg(self.run_dir))

    @property
    def name(self) -> str:
        return self.transport.host


@dataclass(frozen=True)
class TaskInfo:
    """A task as its host reports it (``spawn.py``): state, and once started its process ids."""
    state: str                      # starting, running, exited, lost, busy
    exit_code: int | None = None
    pid: int | None = None
    pgid: int | None = None
    started: float | None = None
    ready: bool = False             # a harness task past its imports (spawn.READY)
    set_up: bool = False            # the run folder's train.json is this attempt's (just before step 1)
    ended_ago_s: float | None = None   # exited: how long ago, on its host's clock

    @classmethod
    def of(cls, info: dict) -> "TaskInfo":
        return cls(str(info.get("state", "lost")), info.get("exit_code"), info.get("pid"),
                   info.get("pgid"), info.get("started"), bool(info.get("ready")), bool(info.get("set_up")),
                   info.get("ended_ago_s"))


@dataclass(frozen=True)
class MetricsTail:
    """The chief's metrics.jsonl: its size (None: not written yet) and last complete line."""
    size: int | None
    last_line: str | None


@dataclass(frozen=True)
class Liveness:
    """A task's signs of life as its host reports them: live processes in its group, their CPU
    seconds (None: its processes are not on that host) and its log's size (None: no log)."""
    state: str
    pids: int = 0
    cpu_s: float | None = None
    log_size: int | None = None

    @classmethod
    def of(cls, info: dict) -> "Liveness":
        return cls(str(info.get("state", "lost")), int(info.get("pids") or 0), info.get("cpu_s"),
                   info.get("log_size"))


class NotInstalled(HostError):
    """The host answered, but no harness is in that run directory (or its Python is missing)."""


class Refused(HostError):
    """hostctl understood the request and said no (a checkpoint gone, an export refused, a full
    disk): ``reason`` is its text, as the host wrote it."""

    def __init__(self, host: str, reason: str, problem: str, fix: str, **kw) -> None:
        self.reason = reason
        super().__init__(host, problem, fix, **kw)


class MissingFile(HostError):
    """The run directory has no such file (yet)."""


def _call(h: Host, sub: str, *, stdin: bytes | None = None, timeout: float = TIMEOUT_S,
          harness_in: str | None = None, **values) -> dict:
    """Host command ``sub`` with its declared arguments as keywords (``host_commands.argv``)."""
    # A short command goes over the host's served channel where the transport has one (SSH: one
    # login per host, not per command; backend/hosts/served.py); other transports just run it.
    run = getattr(h.transport, "call", h.transport.run)
    result = run(_argv(h, sub, values, harness_in=harness_in), stdin=stdin, timeout=timeout)
    if result.exit_code in (NOT_INSTALLED, NO_PYTHON) and not result.stdout.strip():
        raise NotInstalled(h.name, f"no harness in {h.run_dir} (or no Python at {h.python})",
                           "Nothing of this run was started there; check the run directory.",
                           command=result.command, exit_code=result.exit_code, stderr_tail=result.stderr)
    if result.exit_code == 1 and STALE in result.stderr:
        raise HostError(h.name, f"the run folder {h.run_dir} holds a copy of tfconsole from another "
                        "console version (no lib/__main__.py)", "Start a new run from this console; "
                        "this one cannot drive that copy.", command=result.command, exit_code=1)
    answer = _answer(result)
    if result.exit_code == FAILED and "error" in answer:
        problem, fix = f"{sub}: {answer['error']}", "Check the run directory on that host."
        if answer.get("missing"):
            raise MissingFile(h.name, problem, fix, command=result.command, exit_code=FAILED)
        raise Refused(h.name, str(answer["error"]), problem, fix, command=result.command, exit_code=FAILED,
                      stderr_tail=result.stderr)
    result.check(f"hostctl {sub} failed", "Check the host's Python and disk; the stderr tail says more.")
    return answer


def _argv(h: Host, sub: str, values: dict, harness_in: str | None = None) -> list[str]:
    """hostctl from the run folder's harness (or from ``harness_in``'s), acting on the run folder."""
    where = harness_in or h.run_dir
    return layout.host_argv(h.python, where, "hostctl", sub, "--run", h.run_dir,
                            *host_commands.argv(sub, **values))


def _answer(result: Result) -> dict:
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    if result.ok:
        raise HostError(result.host, "hostctl answered something that is not JSON",
                        "Check that nothing in the login shell prints to stdout.",
                        command=result.command, stderr_tail=result.stderr or result.stdout[-400:])
    return {}


# -- installing and tasks ---------------------------------------------------------------------
def install(h: Host, bundle: bytes, *, timeout: float = 120) -> None:
    """Unpack ``bundle`` (a tar of lib/ and job/: ``bundle.bundle``) into the run directory: mkdir, then
    ``unpack.py`` with the host's Python (each file replaced atomically: see there why not tar)."""
    fix = "Check that the working directory is writable and that the host's Python runs (preflight)."
    # 0700: the run's logs, checkpoints, exports and their metadata are the owner's alone.
    h.transport.run(["mkdir", "-p", "-m", "700", "--", h.run_dir],
                    timeout=timeout).check(f"cannot create {h.run_dir}", fix)
    h.transport.run([h.python, "-S", "-c", UNPACK, h.run_dir], stdin=bundle,
                    timeout=timeout).check(f"cannot unpack the harness into {h.run_dir}", fix)


def project(h: Host, tar: bytes, *, timeout: float = 300) -> bool:
    """The run's project folder into its ``job/``: from the host's cache when it has this tar
    (nothing sent), else sent once. True when the host had it."""
    digest = hashlib.sha256(tar).hexdigest()
    try:
        _call(h, "project", hash=digest, stdin=b"", timeout=TIMEOUT_S)
        return True
    except MissingFile:
        _call(h, "project", hash=digest, stdin=tar, timeout=timeout)
        return False


def pip(h: Host, *, timeout: float = 900) -> None:
    """pip installs the run's project requirements into the host's Python (``pip_install: true``).
    Refused (HostError) naming the host and what pip said when it fails."""
    _call(h, "pip", timeout=timeout)


def start(h: Host, tasks: list[dict], *, wait_s: float, settle_s: float,
          timeout: float = 120) -> dict[str, TaskInfo]:
    """Start ``tasks`` (``{"task", "argv", "env"}`` each) detached; the env goes on stdin only."""
    answer = _call(h, "start", wait=wait_s, settle=settle_s,
                   stdin=json.dumps({"tasks": tasks}).encode(), timeout=timeout)
    return {name: TaskInfo.of(info) for name, info in answer.items()}


def status(h: Host, tasks: list[str], *, timeout: float = 30) -> dict[str, TaskInfo]:
    answer = _call(h, "status", task=tasks, timeout=timeout)
    return {name: TaskInfo.of(answer.get(name, {"state": "lost"})) for name in tasks}


def stop(h: Host, tasks: list[str], *, grace_s: float) -> dict[str, list[int]]:
    """Stop the tasks' process groups; task -> pids still alive after KILL (empty: all gone)."""
    return {name: list(info.get("left", [])) for name, info in stop_tasks(h, tasks, grace_s=grace_s).items()}


def stop_tasks(h: Host, tasks: list[str], *, grace_s: float, groups: dict[str, int] | None = None,
               harness: bytes | None = None) -> dict[str, dict]:
    """Stop the tasks and all they started (``proctree.py``); task -> {"left": pids, "killed": bool,
    "found": count, "skipped": why}. ``groups``: task -> process group from the run's record.
    ``harness``: a tar of lib/ (``bundle.harness_bundle``) to stop from when the run folder's own is gone (a cleanup
    removed it): the stop runs from a temporary folder, and the folder is not made again."""
    args = {"task": tasks, "grace": grace_s,
            "group": [f"{task}={pgid}" for task, pgid in (groups or {}).items() if pgid]}
    try:
        return dict(_call(h, "stop", timeout=grace_s + 60, **args))
    except NotInstalled as err:
        if harness is None or err.exit_code != NOT_INSTALLED:
            raise
    return dict(_from_temporary(h, harness, "stop", args, timeout=grace_s + 60))


def _from_temporary(h: Host, bundle: bytes, sub: str, args: dict, *, timeout: float) -> dict:
    """hostctl ``sub`` run from a harness unpacked into a new temporary folder, removed after."""
    fix = "Check the host's temporary folder (mktemp -d) and that tar is installed."
    folder = h.transport.run(["mktemp", "-d"], timeout=30).check("cannot make a temporary folder", fix).stdout.strip()
    try:
        h.transport.run(["tar", "-x", "--no-same-owner", "-f", "-", "-C", folder], stdin=bundle,
                        timeout=60).check(f"cannot unpack the harness into {folder}", fix)
        return _call(h, sub, timeout=timeout, harness_in=folder, **args)
    finally:
        try:
            h.transport.run(["rm", "-rf", "--", folder], timeout=30)
        except HostError:
            pass   # only a copy of the harness; the answer above matters more


def stacks(h: Host, tasks: list[str], *, wait_s: float = 5.0) -> dict[str, dict]:
    """task -> {"pid", "stacks"} (every Python thread's stack), or {"error"} saying why none."""
    answer = _call(h, "stacks", task=tasks, wait=wait_s, timeout=wait_s * len(tasks) + 30)
    return {name: dict(answer.get(name) or {"error": "no answer"}) for name in tasks}


# -- files ------------------------------------------------------------------------------------
def _chunks(h: Host, rel: str, where: dict) -> Iterator[bytes]:
    """A run file's bytes from ``where`` (``{"offset": N}`` or ``{"tail": N}``) to its end, by chunks."""
    while True:
        answer = _call(h, "read", path=rel, limit=CHUNK, **where)
        data = base64.b64decode(answer["data"])
        yield data
        if answer["eof"] or not data:
            return
        where = {"offset": answer["offset"] + len(data)}


def read_at(h: Host, rel: str, offset: int, *, limit: int = CHUNK) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of a run file from ``offset``, and the file's size (-1: no file)."""
    try:
        answer = _call(h, "read", path=rel, offset=offset, limit=limit)
    except MissingFile:
        return b"", -1
    return base64.b64decode(answer["data"]), int(answer["size"])


def read_tail(h: Host, rel: str, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of a run file (a log); b"" when it does not exist yet."""
    try:
        return b"".join(_chunks(h, rel, {"tail": max_bytes}))[-max_bytes:]
    except (MissingFile, NotInstalled):
        return b""


def read_file(h: Host, rel: str, *, timeout: float = TIMEOUT_S) -> bytes | None:
    """A small run file whole (``train.json``), in one call; None when it does not exist."""
    try:
        answer = _call(h, "read", path=rel, offset=0, limit=CHUNK, timeout=timeout)
    except MissingFile:
        return None
    return base64.b64decode(answer["data"])


def follow(h: Host, rel: str) -> Stream:
    """A run file's bytes from its start, then as they are written (``hostctl follow``, like
    ``tail -F``); read ``.stdout`` line by line, ``close()`` to end it."""
    return h.transport.stream(_argv(h, "follow", {"path": rel}))


def fetch_file(h: Host, rel: str, local_path: str | Path) -> int:
    """Copy a run file to this machine, in chunks; returns its size."""
    size = 0
    with open(local_path, "wb") as fh:
        for data in _chunks(h, rel, {"offset": 0}):
            fh.write(data)
            size += len(data)
    return size


def files(h: Host, rel: str) -> list[tuple[str, int]] | None:
    """Every file under the run folder ``rel`` as (path inside it, size); None when the folder
    does not exist (yet). A harness older than ``hostctl files`` is told apart from no harness."""
    try:
        answer = _call(h, "files", dir=rel)
    except MissingFile:
        return None
    except NotInstalled as err:
        if "invalid choice" in (err.stderr_tail or ""):
            raise HostError(h.name, f"the harness in {h.run_dir} cannot list files (it predates this "
                            "command)", f"Copy {rel}/ from that host by hand (scp -r), or use a run "
                            "started by this version.") from None
        raise
    return [(str(f["path"]), int(f["size"])) for f in answer.get("files", [])]


def fetch_new(h: Host, rel: str, local_root: str | Path) -> tuple[int, int]:
    """Mirror the run folder ``rel`` into ``local_root``, fetching only what is new: the bytes a
    file gained since the last copy are appended. For folders whose files only grow (TensorBoard's
    event files: a new writer makes a new file); a local copy as long as the host's, or longer,
    is left as it is, so a mirror that is the host's folder itself (a local run whose work folder
    is this runs folder) is never written. Returns (files that grew, bytes fetched); (0, 0) for
    no folder. A path the host lists outside ``local_root`` is refused: its answer is not trusted."""
    root = Path(local_root)
    changed = fetched = 0
    for path, size in files(h, rel) or []:
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise HostError(h.name, f"listed a file outside {rel}: {path!r}",
                            "Check the run directory on that host.")
        local = root / path
        have = local.stat().st_size if local.is_file() else 0
        if have >= size and local.is_file():
            continue
        local.parent.mkdir(parents=True, exist_ok=True)
        with open(local, "ab") as fh:
            for data in _chunks(h, f"{rel}/{path}", {"offset": have}):
                fh.write(data)
                fetched += len(data)
        changed += 1
    return changed, fetched


def push_file(h: Host, local_path: str | Path, rel: str, *, private: bool = False) -> int:
    """Copy a local file into the run directory; it appears whole (renamed in when complete).
    ``private``: mode 0600 from the start (a file holding the job's env)."""
    with open(local_path, "rb") as fh:
        return _write(h, rel, iter(lambda: fh.read(CHUNK), b""), private=private)


def put_bytes(h: Host, data: bytes, rel: str, *, private: bool = False) -> int:
    """Write ``data`` as a run file, like ``push_file``."""
    return _write(h, rel, (data[i:i + CHUNK] for i in range(0, len(data), CHUNK)), private=private)


def _write(h: Host, rel: str, chunks: Iterator[bytes], *, private: bool) -> int:
    offset = 0
    for data in chunks:
        _call(h, "write", path=rel, offset=offset, private=private, stdin=data)
        offset += len(data)
    _call(h, "write", path=rel, offset=offset, final=True, private=private, stdin=b"")
    return offset


# -- the chief ----------------------------------------------------------------------------------
def progress(h: Host) -> MetricsTail:
    answer = _call(h, "progress", timeout=30)
    return MetricsTail(answer.get("size"), answer.get("last"))


def liveness(h: Host, tasks: list[str]) -> dict[str, Liveness]:
    """Each task's signs of life on this host (``hostctl liveness``)."""
    answer = _call(h, "liveness", task=tasks, timeout=30)
    return {name: Liveness.of(answer.get(name) or {}) for name in tasks}


def request_save(h: Host, *, stop: bool = False) -> str:
    """Leave a save-now request for the chief; returns its name (for ``save_done``). ``stop``:
    every worker exits once the step is saved (``stop --save``)."""
    return str(_call(h, "request-save", stop=stop, timeout=30)["name"])


def save_done(h: Host, name: str) -> int | None:
    """The step the request ``name`` was saved at, or None while it waits."""
    return _call(h, "save-done", name=name, timeout=30).get("step")


def request_profile(h: Host, steps: int) -> str:
    """Leave a profile request for the chief; returns its name (for ``profile_done``)."""
    return str(_call(h, "request-profile", steps=int(steps), timeout=30)["name"])


def profile_done(h: Host, name: str) -> dict | None:
    """``{"step", "steps", "dir", "error"}`` once the workers began the window, else None."""
    answer = _call(h, "profile-done", name=name, timeout=30)
    return answer if answer.get("step") is not None else None


def exports(h: Host) -> list[dict]:
    """Every finished export's result.json, by name."""
    return list(_call(h, "exports", timeout=30)["exports"])


# -- checkpoints: ``folder`` is a task's checkpoint folder, relative to the run directory ---------
def ckpt_list(h: Host, folder: str) -> object:
    """Checkpoints retention keeps in ``folder``, oldest first, each with ``held`` (as listed:
    the caller checks its names before they name anything here)."""
    return _call(h, "ckpt-list", dir=folder).get("checkpoints")


def ckpt_abandoned(h: Host, folder: str) -> object:
    """Checkpoints that restores moved aside in ``folder``."""
    return _call(h, "ckpt-abandoned", dir=folder).get("checkpoints")


def ckpt_hold(h: Host, folder: str, step: int | None, *, purpose: str, ttl_s: float | None) -> dict:
    """Hold ``step`` (None: the newest, resolved now): ``{"hold", "step", ...}``; ``Refused`` if gone."""
    return _call(h, "ckpt-hold", dir=folder, step="latest" if step is None else int(step), purpose=purpose,
                 ttl=ttl_s)


def ckpt_release(h: Host, folder: str, hold_id: str) -> bool:
    return bool(_call(h, "ckpt-release", dir=folder, hold=hold_id).get("released"))


def ckpt_abandon(h: Host, folder: str, *, after: int, tag: str, keep_hold: str | None) -> list[int]:
    """Move the checkpoints newer than ``after`` aside (under ``tag``); the steps moved."""
    return list(_call(h, "ckpt-abandon", dir=folder, after=after, tag=tag, keep_hold=keep_hold or None)["moved"])


def ckpt_verify(h: Host, folder: str, steps: list[int], *, timeout: float) -> dict:
    """Read ``steps`` of ``folder`` newest first with TensorFlow's checkpoint reader, until one
    reads whole: ``{"good": step or None, "damaged": {"step": why}}``."""
    return _call(h, "ckpt-verify", dir=folder, step=[int(step) for step in steps], timeout=timeout)


def resumed(h: Host, attempt: int, tasks: list[str]) -> dict:
    """``{"resumed": {task: step}, "ended": [task]}`` for ``attempt``'s tasks in this run directory."""
    return _call(h, "resumed", attempt=attempt, task=tasks)


def export(h: Host, job: str | None, *, step: int, name: str | None, formats: tuple[str, ...], timeout: float) -> dict:
    """Export checkpoint ``step`` with the job module ``job`` (run-relative; None: a command job,
    whose model the callback described in checkpoints/model.json) and verify it in a fresh
    process; the result (export.py's result.json). ``Refused`` says why not."""
    return _call(h, "export", job=job or None, formats=",".join(formats), step=step, name=name or None,
                 timeout=timeout)
