"""Watch agent: runs on the chief's host and streams one run directory as JSON lines on stdout.

A host command like every other (``backend/client/__main__.py``): the console runs it on the
chief as ``python RUN/lib watch --run-dir RUN [--offsets-json JSON] [--poll] [--host NAME]``
(``layout.host_argv``, with site-packages: it wakes on watchdog's events), reading the run
folder's files by the names ``layout`` gives them. Standard library at module level; watchdog is
imported where it is used, so a host without it still runs ``--gpu-only``.
On the run's other hosts it runs as ``--gpu-only``: heartbeats and that host's GPU readings,
nothing else (no watchdog needed); where nvidia-smi gives no readings it says ``no_gpu`` and exits.

Events, one JSON object per line:
  metrics    {"type":"metrics","lines":N,"bytes":B}   then B raw bytes: N {...} lines of
                                                       metrics.jsonl, verbatim, each ending in
                                                       a newline (the reader parses them strictly)
  log        {"type":"log","task":T,"line":L}          one complete line of logs/T.log, its first
                                                       LOG_LINE_MAX bytes and "... [cut N bytes]"
                                                       where it is longer
  skipped    {"type":"skipped","file":F,"count":N}     N lines of F dropped in this batch
                                                       (not framed as {...}, or longer than 1 MB)
  checkpoint {"type":"checkpoint","step":S,"meta":{}}  once .index and .meta.json both exist
  export     {"type":"export","name":N,"result":{}}    once exports/N/result.json exists
  task_exit  {"type":"task_exit","task":T,"exit_code":C}
  offsets    {"type":"offsets","offsets":{rel:{"inode":I,"offset":O}}}  closes every batch
  heartbeat  {"type":"heartbeat","time":T}
  gpu        {"type":"gpu","time":T,"host":H,"gpus":[{"index","util","mem_used_mib","mem_total_mib"}]}
                                                       with each heartbeat, where nvidia-smi runs;
                                                       H is --host (the console's name for it)
  no_gpu     {"type":"no_gpu","host":H}                --gpu-only: no readings here; then it exits
  error      {"type":"error","message":M}              (stderr may not reach the console)

Offsets always point just past the last line sent, so a reader that commits a batch when its
``offsets`` event arrives and restarts the agent with them sees every line exactly once.
Checkpoints, exports and exits are re-sent on every start; the reader de-duplicates them.

Why one file of this size: one process and one loop: its tailing, batch framing, GPU sampling
and watchdog wake-ups feed the same event stream, whose every event is listed above.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

from . import layout

MAX_LINE = 1 << 20          # a longer line is skipped and counted, never held in memory
CHUNK = MAX_LINE + 1        # a chunk with no newline therefore always means "too long"
BATCH_BYTES = 8 << 20       # per file per batch: a long backlog streams out in steps, not RAM
# A log line is sent cut to this many bytes: a progress bar written to a file or a printed tensor
# makes 1 MB lines, and 400 of them held 600-900 MiB in the console. Metric lines are
# never cut (they are JSON): a longer one is parsed, or quarantined, whole.
LOG_LINE_MAX = 4096
HEARTBEAT_S = 2.0
GPU_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
RESCAN_S = 1.0              # full rescan even without events: events can be missed (overflow)
METRICS = layout.METRICS
SUBDIRS = (layout.LOGS, layout.CHECKPOINTS, layout.EXPORTS, layout.TASKS)
# inotify sees only writes made by this kernel: on these, another host's writes are invisible.
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs",
              "lustre", "gpfs", "beegfs", "virtiofs", "sshfs", "davfs", "ncpfs"}


class Tail:
    """Follows one file by inode and offset; ``offset`` is always just past the last full line."""

    def __init__(self, path: str, inode: int | None = None, offset: int = 0, skip: bool = False):
        self.path, self.inode, self.offset, self.skip = path, inode, offset, skip
        self.fh = None           # kept open so a rotated file's rest can still be read
        self.skipped = 0
        self.more = False        # stopped at BATCH_BYTES with more to read

    def state(self) -> dict:
        out = {"inode": self.inode, "offset": self.offset}
        if self.skip:
            out["skip"] = True   # resume inside a too-long line: drop its rest too
        return out

    def read(self) -> list[bytes]:
        lines: list[bytes] = []
        if self.fh is not None and _inode(self.path) != self.inode:
            lines += self._drain(self.fh, final=True)   # rotated or removed: finish the old one
            self.fh.close()
            # inode None: the old file is done, so _open must not look for it again
            self.fh, self.inode, self.offset, self.skip = None, None, 0, False
        if self.fh is None and not self._open(lines):
            return lines
        if os.fstat(self.fh.fileno()).st_size < self.offset:
            self.offset, self.skip = 0, False            # shrank: truncated in place
        return lines + self._drain(self.fh, final=False)

    def _open(self, lines: list[bytes]) -> bool:
        try:
            fh = open(self.path, "rb")
        except OSError:
            return False
        inode = os.fstat(fh.fileno()).st_ino
        if self.inode is not None and inode != self.inode:
            old = _find_inode(os.path.dirname(self.path), self.inode)  # rotated while we were away
            if old:
                with open(old, "rb") as ofh:
                    lines += self._drain(ofh, final=True)
            self.offset, self.skip = 0, False
        self.fh, self.inode = fh, inode
        return True

    def _drain(self, fh, *, final: bool) -> list[bytes]:
        out: list[bytes] = []
        start = self.offset
        while True:
            self.more = not final and self.offset - start >= BATCH_BYTES
            if self.more:
                return out
            fh.seek(self.offset)
            data = fh.read(CHUNK)
            if not data:
                return out
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) == CHUNK or self.skip:      # no end in sight: drop what is there
                    self.skip, self.offset = True, self.offset + len(data)
                    continue
                if final:                                 # the old file will not grow: flush it
                    out.append(data)
                    self.offset += len(data)
                return out                                # a partial line: wait for its end
            parts = data[:end].split(b"\n")
            if self.skip:
                parts.pop(0)
                self.skipped += 1
                self.skip = False
            out += parts   # none is longer than MAX_LINE: a chunk is at most MAX_LINE + 1 bytes
            self.offset += end + 1


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _find_inode(folder: str, inode: int) -> str | None:
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if entry.is_file(follow_symlinks=False) and entry.inode() == inode:
                    return entry.path
    except OSError:
        pass
    return None


def _read_json(path: str):
    """The parsed file, or None while it is missing or still being written."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except (OSError, ValueError):
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


class Agent:
    def __init__(self, run_dir: str, offsets: dict, out) -> None:
        self.run = run_dir
        self.out = out
        self.tails: dict[str, Tail] = {}
        for rel, st in offsets.items():
            self.tails[rel] = Tail(os.path.join(run_dir, rel), st.get("inode"),
                                   int(st.get("offset", 0)), bool(st.get("skip", False)))
        self.seen_ckpt: set[int] = set()
        self.seen_export: set[str] = set()
        self.seen_exit: set[str] = set()

    def _tail(self, rel: str) -> Tail:
        if rel not in self.tails:
            self.tails[rel] = Tail(os.path.join(self.run, rel))
        return self.tails[rel]

    def scan(self, kinds: set[str]) -> list[bytes]:
        """One batch of encoded events for the parts of the run directory in ``kinds``."""
        events: list[bytes] = []
        moved = False
        if "metrics" in kinds:
            moved |= self._metrics(events)
        if layout.LOGS in kinds:
            for name in _listdir(os.path.join(self.run, layout.LOGS)):
                if name.endswith(".log"):
                    moved |= self._log(name[:-4], events)
        if layout.CHECKPOINTS in kinds:
            self._checkpoints(events)
        if layout.EXPORTS in kinds:
            self._exports(events)
        if layout.TASKS in kinds:
            self._exits(events)
        if moved:
            offsets = {rel: t.state() for rel, t in self.tails.items() if t.inode is not None}
            events.append(_enc({"type": "offsets", "offsets": offsets}))
        return events

    def _metrics(self, events: list[bytes]) -> bool:
        tail = self._tail(METRICS)
        before = (tail.inode, tail.offset)
        lines = tail.read()
        block, bad = _framed(lines)
        if block:   # one block, not an event per line: the reader handles a batch, not lines
            events.append(_enc({"type": "metrics", "lines": block.count(b"\n"), "bytes": len(block)})
                          + block)
        return self._skipped(METRICS, tail, bad, events) or before != (tail.inode, tail.offset)

    def _log(self, task: str, events: list[bytes]) -> bool:
        rel = f"{layout.LOGS}/{task}.log"
        tail = self._tail(rel)
        before = (tail.inode, tail.offset)
        for line in tail.read():
            text = cut_line(line.rstrip(b"\r"))
            events.append(_enc({"type": "log", "task": task, "line": text}))
        return self._skipped(rel, tail, 0, events) or before != (tail.inode, tail.offset)

    @staticmethod
    def _skipped(rel: str, tail: Tail, bad: int, events: list[bytes]) -> bool:
        count, tail.skipped = bad + tail.skipped, 0
        if count:
            events.append(_enc({"type": "skipped", "file": rel, "count": count}))
        return bool(count)

    def _checkpoints(self, events: list[bytes]) -> None:
        folder = os.path.join(self.run, layout.CHECKPOINTS)
        names = set(_listdir(folder))
        for name in names:
            if not (name.startswith("ckpt-") and name.endswith(".index")):
                continue
            try:
                step = int(name[5:-6])
            except ValueError:
                continue
            meta_name = f"ckpt-{step}.meta.json"
            if step in self.seen_ckpt or meta_name not in names:
                continue
            meta = _read_json(os.path.join(folder, meta_name))
            if isinstance(meta, dict):      # else: half written, look again next time
                self.seen_ckpt.add(step)
                events.append(_enc({"type": "checkpoint", "step": step, "meta": meta}))

    def _exports(self, events: list[bytes]) -> None:
        folder = os.path.join(self.run, layout.EXPORTS)
        for name in _listdir(folder):
            if name.startswith(".") or name in self.seen_export:
                continue   # .tmp-* is still being written; it is renamed when done
            result = _read_json(os.path.join(folder, name, "result.json"))
            if isinstance(result, dict):
                self.seen_export.add(name)
                events.append(_enc({"type": "export", "name": name, "result": result}))

    def _exits(self, events: list[bytes]) -> None:
        folder = os.path.join(self.run, layout.TASKS)
        for name in _listdir(folder):
            task = name[:-5]
            if not name.endswith(".exit") or task in self.seen_exit:
                continue
            try:
                with open(os.path.join(folder, name), "rb") as fh:
                    code = int(fh.read().strip())
            except (OSError, ValueError):
                continue   # empty while being written
            self.seen_exit.add(task)
            events.append(_enc({"type": "task_exit", "task": task, "exit_code": code}))


def cut_line(line: bytes | str, limit: int = LOG_LINE_MAX) -> str:
    """``line`` as text, its first ``limit`` bytes and a marker saying how many more were cut."""
    data = line.encode("utf-8", "replace") if isinstance(line, str) else line
    if len(data) <= limit:
        return line if isinstance(line, str) else data.decode("utf-8", "replace")
    # "ignore": a multi-byte character split at the cut is dropped, not shown as a stray glyph
    return f"{data[:limit].decode('utf-8', 'ignore')} ... [cut {len(data) - limit} bytes]"


def _framed(lines: list[bytes]) -> tuple[bytes, int]:
    """(the lines framed as one JSON object each, newline-terminated; how many were not).

    Only the framing is checked, not the JSON: parsing every line took 4 of the chief's
    CPU-seconds per million lines (bench/watch_catchup.py); the console parses each line strictly
    and quarantines what fails. The common case needs no loop: when every one of the n-1 joints
    reads ``}\\n{`` and the ends are braces, every line is framed (and none is blank)."""
    joined = b"\n".join(lines)
    if joined[:1] == b"{" and joined[-1:] == b"}" and joined.count(b"}\n{") == len(lines) - 1:
        return joined + b"\n", 0
    good, bad = [], 0
    for line in lines:
        line = line.strip()
        if line[:1] == b"{" and line[-1:] == b"}":
            good.append(line)
        elif line:
            bad += 1
    return b"".join(line + b"\n" for line in good), bad


def _enc(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


class GpuSampler:
    """This host's GPUs, from ``nvidia-smi`` (absent or failing three times: no samples)."""

    def __init__(self, host: str | None = None) -> None:
        self.exe = shutil.which("nvidia-smi")
        self.failures = 0
        self.host = host or socket.gethostname()

    @property
    def gave_up(self) -> bool:
        return not self.exe or self.failures >= 3

    def sample(self) -> bytes | None:
        if not self.exe or self.failures >= 3:
            return None
        try:
            out = subprocess.run([self.exe, *GPU_QUERY], capture_output=True, text=True, timeout=5)
            gpus = parse_gpus(out.stdout) if out.returncode == 0 else []
        except (OSError, subprocess.SubprocessError):
            gpus = []
        if not gpus:
            self.failures += 1
            return None
        return _enc({"type": "gpu", "time": time.time(), "host": self.host, "gpus": gpus})


def parse_gpus(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total`` CSV rows."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4:
            continue
        try:   # "[N/A]" where a GPU does not report a value: skip that reading only
            index = int(cells[0])
            util, used, total = (float(c) if c.replace(".", "", 1).isdigit() else None for c in cells[1:])
        except ValueError:
            continue
        gpus.append({"index": index, "util": util, "mem_used_mib": used, "mem_total_mib": total})
    return gpus


def kind_of(run_dir: str, path: str) -> str | None:
    """Which part of the run directory a watchdog event touched."""
    rel = os.path.relpath(path, run_dir)
    head = rel.split(os.sep, 1)[0]
    if head in SUBDIRS:
        return head
    if head.startswith(METRICS):
        return "metrics"
    return None


def needs_polling(path: str, mounts_file: str = "/proc/mounts") -> bool:
    """True when the run directory sits on a filesystem whose remote writes inotify misses."""
    path = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open(mounts_file) as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].encode().decode("unicode_escape")   # \040 is a space
                if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
                    best, fstype = point, fields[2]
    except OSError:
        return False
    return fstype in NETWORK_FS or fstype.startswith("fuse")


class Watcher:
    """Turns watchdog events into wake-ups of the main loop; the loop itself reads the files."""

    def __init__(self, run_dir: str, *, poll: bool, interval: float) -> None:
        from watchdog.events import FileSystemEventHandler
        if poll:
            from watchdog.observers.polling import PollingObserver
            self.observer = PollingObserver(timeout=interval)
        else:
            from watchdog.observers import Observer
            self.observer = Observer()
        self.run, self.wake, self.lock = run_dir, threading.Event(), threading.Lock()
        self.dirty: set[str] = set()
        self.watched: set[str] = set()
        watcher = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                kinds = {kind_of(watcher.run, event.src_path)}
                if getattr(event, "dest_path", ""):
                    kinds.add(kind_of(watcher.run, event.dest_path))
                if event.is_directory and os.path.dirname(event.src_path) == watcher.run:
                    kinds.add("dirs")   # a subfolder appeared: watch it too
                kinds.discard(None)
                if kinds:
                    with watcher.lock:
                        watcher.dirty |= kinds
                    watcher.wake.set()

        self.handler = Handler()
        self.observer.start()

    def ensure_watches(self) -> None:
        """Watch the run directory and each of its subfolders once they exist (not recursive:
        tensorboard/ and exports' SavedModels would flood us)."""
        for path in [self.run] + [os.path.join(self.run, d) for d in SUBDIRS]:
            if path not in self.watched and os.path.isdir(path):
                try:
                    self.observer.schedule(self.handler, path, recursive=False)
                    self.watched.add(path)
                except OSError:
                    pass   # vanished or inotify limit: the periodic rescan still covers it

    def take(self, timeout: float) -> set[str]:
        self.wake.wait(timeout)
        self.wake.clear()
        with self.lock:
            kinds, self.dirty = self.dirty, set()
        return kinds

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=2)


def _stdin_closed(stop: threading.Event) -> None:
    try:   # os.read, not sys.stdin: a daemon thread inside a buffered read aborts shutdown
        while os.read(0, 65536):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def _watch_stdin(stop: threading.Event) -> None:
    """Exit with the SSH channel or pipe; /dev/null or a terminal on stdin means run until told."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISREG(mode):
        threading.Thread(target=_stdin_closed, args=(stop,), daemon=True).start()


def _load_offsets(value: str | None) -> dict:
    if not value:
        return {}
    if not value.lstrip().startswith("{"):
        with open(value) as fh:
            value = fh.read()
    data = json.loads(value)
    return data.get("offsets", data) if isinstance(data, dict) else {}


def serve_gpus(host: str | None, *, out, stop) -> None:
    """--gpu-only: a heartbeat and this host's GPU readings every HEARTBEAT_S, until told to
    stop; ``no_gpu`` and return where nvidia-smi is absent or keeps failing."""
    gpus = GpuSampler(host)
    while not stop.is_set():
        event = gpus.sample()
        if gpus.gave_up:
            out.write(_enc({"type": "no_gpu", "host": gpus.host}))
            out.flush()
            return
        out.write(_enc({"type": "heartbeat", "time": time.time()}) + (event or b""))
        out.flush()
        stop.wait(HEARTBEAT_S)


def serve(run_dir: str, offsets: dict, *, poll: bool, interval: float, out, stop,
          host: str | None = None) -> None:
    agent = Agent(run_dir, offsets, out)
    poll = poll or needs_polling(run_dir)
    watcher = Watcher(run_dir, poll=poll, interval=interval)
    # a signal or a closed stdin sets ``stop``: wake the loop at once rather than at its timeout
    threading.Thread(target=lambda: (stop.wait(), watcher.wake.set()), daemon=True).start()
    rescan_every = max(RESCAN_S, interval) if poll else RESCAN_S
    kinds, next_rescan, next_beat = {"all"}, 0.0, 0.0
    gpus = GpuSampler(host)
    try:
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_rescan or "dirs" in kinds or "all" in kinds:
                watcher.ensure_watches()
                kinds = {"metrics", *SUBDIRS}
                next_rescan = now + rescan_every
            events = agent.scan(kinds) if kinds else []
            backlog = any(t.more for t in agent.tails.values())
            if now >= next_beat:
                events.append(_enc({"type": "heartbeat", "time": time.time()}))
                events += [e for e in [gpus.sample()] if e]   # same period as the heartbeat
                next_beat = now + HEARTBEAT_S
            if events:
                out.write(b"".join(events))
                out.flush()
            wait = 0.0 if backlog else min(next_rescan, next_beat) - time.monotonic()
            kinds = watcher.take(wait) | ({"metrics", layout.LOGS} if backlog else set())
    finally:
        watcher.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--offsets-json", help="offsets to resume from: JSON text or a file")
    ap.add_argument("--poll", action="store_true", help="poll instead of inotify (NFS and kin)")
    ap.add_argument("--poll-interval", type=float, default=0.5)
    ap.add_argument("--host", help="this host's name in gpu events (default: its hostname)")
    ap.add_argument("--gpu-only", action="store_true", help="heartbeats and GPU readings only")
    args = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    _watch_stdin(stop)
    out = sys.stdout.buffer
    try:
        if args.gpu_only:
            serve_gpus(args.host, out=out, stop=stop)
        else:
            serve(os.path.abspath(args.run_dir), _load_offsets(args.offsets_json), poll=args.poll,
                  interval=args.poll_interval, out=out, stop=stop, host=args.host)
    except BrokenPipeError:
        # the reader went away: that is our signal to stop (and no traceback at exit's flush)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        return 0
    except Exception as exc:  # noqa: BLE001 - stderr may go nowhere; tell the reader why we died
        try:
            out.write(_enc({"type": "error", "message": f"{type(exc).__name__}: {exc}"}))
            out.flush()
        except OSError:
            pass
        return 1
    return 0
