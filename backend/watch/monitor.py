"""The console side of the watch agent: one background thread per live run.

It starts the watch agent (``python RUN/lib watch``, backend/client/harness/watch.py) on the chief
through a transport, reads its JSON events, and commits them a
batch at a time: metric and log lines are held until the agent's ``offsets`` event closes their
batch, then go to the local mirror, the store and the deques together, and the offsets are saved.
A batch cut short by a broken stream is dropped and sent again by the restarted agent, so every
line lands exactly once. Nothing here touches Streamlit: pages read the getters, which return
copies.

Why one file of this size: one monitor thread reads one event stream and commits a batch at a time
to the mirror, the store and the log deques together; the chief's agent, the GPU-only agents of
other hosts and the reconnect back-off are that one thread's loop.
"""
from __future__ import annotations

import json
import math
import os
import threading
import sys
import time
from collections import deque
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

from backend.hosts.base import Transport
from backend.client.harness.contract import watch as agent
from backend.watch.journal import Journal
from backend.watch.lines import parse_metric_block

BATCH_BYTES, CHUNK, METRICS, cut_line = agent.BATCH_BYTES, agent.CHUNK, agent.METRICS, agent.cut_line

# A run folder with no RUN/lib (one a test or a bench makes here) is watched by this checkout's
# copy of the same agent a host runs from its run folder (``python RUN/lib watch``).
_FROM_HERE = ("import sys; sys.path.insert(0, {root!r}); "
              "from backend.client.harness.watch import main; sys.exit(main(sys.argv[1:]))")


def local_agent(python: str = sys.executable) -> tuple[str, ...]:
    """The watch agent's command line for a run folder on this machine, from this checkout."""
    return (python, "-c", _FROM_HERE.format(root=str(Path(__file__).resolve().parents[2])))


# Agents copied to a chief before metrics travelled in blocks send one event per line.
_METRIC = b'{"type":"metric","data":'
_STABLE_S = 5.0   # a session that lasted this long resets the reconnect backoff
# The agent sends a heartbeat every 2 s: this long with no line at all means the link is gone
# (a silent network cut), so the session ends and reconnects (docs/reliability.md).
STREAM_IDLE_S = 10.0
GPU_SAMPLES = 1800   # an hour of the agent's 2 s samples per host
# What the agent says is checked before it is believed: a block's byte count is a
# buffer size, and offsets are kept and sent back on the next start's command line.
# A batch reads at most BATCH_BYTES + one chunk per file; the rest of a rotated file comes whole.
MAX_BLOCK_BYTES = 32 * (BATCH_BYTES + CHUNK)    # 288 MiB
MAX_LOG_TASKS = 1024      # log files followed per run: each holds up to log_lines lines
MAX_TASK_NAME = 128
MAX_OFFSET = 1 << 62
MAX_COUNT = 1 << 32       # a skipped-lines count
OTHER_LOGS = "logs (past the first 1024 tasks, or a bad name)"   # where their lines are counted


@dataclass(frozen=True)
class GpuHost:
    """Another host of the run, whose GPUs an agent there reports (``watch --gpu-only``)."""
    name: str                                   # the console's name for it: the readings' key
    transport_factory: Callable[[], Transport]
    agent: tuple[str, ...]                      # the agent's command there (``layout.host_argv``)
    run_dir: str
    # Several nodes reached through this host (a Slurm job's, by ``srun``): wraps the agent's
    # command line at each connect (raises while there is nothing to reach: tried again later).
    # Each node's agent then names its own readings (its hostname), and one node without GPUs
    # does not end the others' readings.
    fan_out: Callable[[list[str]], list[str]] | None = None


class _Batch:
    def __init__(self) -> None:
        self.metrics: list[bytes] = []   # blocks of lines, each line ending in a newline
        self.logs: dict[str, list[str]] = {}
        self.skipped: dict[str, int] = {}


class RunMonitor:
    def __init__(self, transport_factory: Callable[[], Transport], remote_run_dir: str,
                 local_run_dir: str, store, python: str = sys.executable, agent: tuple[str, ...] | None = None,
                 *, poll: bool = False, poll_interval: float = 0.5, log_lines: int = 1000,
                 backoff: tuple[float, float] = (0.5, 15.0), host: str | None = None,
                 gpu_hosts: tuple[GpuHost, ...] = ()) -> None:
        """``transport_factory()`` is called on every (re)connect; the monitor owns and closes
        what it returns. ``agent``: the agent's command on the chief's host (default: ``local_agent(python)``). ``host``:
        the chief host's name in GPU readings; ``gpu_hosts``: the run's other hosts, each
        followed by a GPU-only agent of its own, so Monitor shows every host's GPUs."""
        self._factory, self._remote, self._store = transport_factory, remote_run_dir, store
        self._agent, self._poll = tuple(agent or local_agent(python)), poll
        self._poll_interval = poll_interval
        self._backoff = backoff
        os.makedirs(local_run_dir, exist_ok=True)
        self._journal = Journal(local_run_dir)
        self._lock = threading.Lock()
        self._logs: dict[str, deque] = {}
        self._log_lines = log_lines
        self._checkpoints: dict[int, dict] = {}
        self._exports: dict[str, dict] = {}
        self._exits: dict[str, int] = {}
        self._gpu: dict[str, deque] = {}   # host -> (time, [gpu readings]); not journaled: live only
        # last_data: when the agent's last line of any kind came (a console shows "no data since").
        self._status = {"state": "idle", "connects": 0, "last_error": "", "last_event": None,
                        "last_heartbeat": None, "last_data": None}
        self._stop = threading.Event()
        self._stream = None
        self._thread: threading.Thread | None = None
        self._host, self._gpu_hosts = host, tuple(gpu_hosts)
        self._gpu_streams: set = set()
        self._gpu_threads: list[threading.Thread] = []

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> "RunMonitor":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="run-monitor", daemon=True)
            self._thread.start()
            self._gpu_threads = [threading.Thread(target=self._gpu_loop, args=(h,), daemon=True,
                                                  name=f"gpu-{h.name}") for h in self._gpu_hosts]
            for t in self._gpu_threads:
                t.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            streams = [self._stream, *self._gpu_streams]
        for stream in streams:
            if stream is not None:
                _quietly(stream.close)   # unblocks the reader threads' readline
        if self._thread is not None:
            self._thread.join(timeout)
        for t in self._gpu_threads:
            t.join(timeout)
        with self._lock:   # a reader thread that did not end in time may still commit
            self._journal.close()
        self._set(state="stopped")

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- getters (copies, safe from any thread) ------------------------------------------------

    def status(self) -> dict:
        with self._lock:
            out, stream = dict(self._status), self._stream
        seen = getattr(getattr(stream, "stdout", None), "last_data", None)
        if seen:   # read from the live stream: the hot path keeps no lock per line
            out["last_data"] = seen
        return out

    def log_tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._logs)

    def logs(self, task: str) -> list[str]:
        with self._lock:
            return list(self._logs.get(task, ()))

    def checkpoints(self) -> dict[int, dict]:
        with self._lock:
            return {step: dict(meta) for step, meta in sorted(self._checkpoints.items())}

    def exports(self) -> dict[str, dict]:
        with self._lock:
            return {name: dict(res) for name, res in sorted(self._exports.items())}

    def gpu(self) -> dict[str, list]:
        """host -> [(time, [{"index", "util", "mem_used_mib", "mem_total_mib"}])], oldest first."""
        with self._lock:
            return {host: list(samples) for host, samples in self._gpu.items()}

    def task_exits(self) -> dict[str, int]:
        with self._lock:
            return dict(self._exits)

    def skipped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._journal.skipped)

    def offsets(self) -> dict:
        with self._lock:
            return json.loads(json.dumps(self._journal.offsets))

    # -- the reader thread ---------------------------------------------------------------------

    def _loop(self) -> None:
        self._replay()
        delay = self._backoff[0]
        while not self._stop.is_set():
            began = time.monotonic()
            self._session()
            if self._stop.is_set():
                break
            stable = time.monotonic() - began >= _STABLE_S
            delay = self._backoff[0] if stable else min(delay * 2, self._backoff[1])
            self._set(state="reconnecting")
            self._stop.wait(delay)

    def _replay(self) -> None:
        """Rebuild the store and log tails from the mirror of an earlier console process."""
        for block in self._journal.metric_blocks():
            self._ingest(block)
        with self._lock:
            for task, lines in self._journal.recent_logs(self._log_lines).items():
                # cut again: a mirror written by an older console may hold 1 MB lines
                self._logs[task] = deque(map(cut_line, lines), maxlen=self._log_lines)

    def _argv(self) -> list[str]:
        argv = [*self._agent, "--run-dir", self._remote]
        if self._journal.offsets:
            argv += ["--offsets-json", json.dumps(self._journal.offsets, separators=(",", ":"))]
        if self._poll:   # else the agent still polls by itself on NFS, CIFS, fuse and kin
            argv += ["--poll", "--poll-interval", str(self._poll_interval)]
        if self._host:
            argv += ["--host", self._host]
        return argv

    def _gpu_loop(self, h: GpuHost) -> None:
        """Follow one other host's GPU-only agent, reconnecting like the chief's; a host with
        no GPU readings (``no_gpu``) is not asked again."""
        delay = self._backoff[0]
        argv = [*h.agent, "--run-dir", h.run_dir, "--gpu-only"]
        argv += [] if h.fan_out else ["--host", h.name]
        while not self._stop.is_set():
            began, transport, stream = time.monotonic(), None, None
            readings = no_gpu = 0
            try:
                command = h.fan_out(argv) if h.fan_out else argv
                transport = h.transport_factory()
                stream = transport.stream(command, idle_timeout=STREAM_IDLE_S)
                with self._lock:
                    self._gpu_streams.add(stream)
                for line in stream.stdout:
                    if self._stop.is_set() or (b'"no_gpu"' in line and not h.fan_out):
                        return
                    no_gpu += b'"no_gpu"' in line
                    if line.startswith(b'{"type":"gpu"'):
                        readings += 1
                        event = json.loads(line)
                        self._on_other("gpu", {**event, "host": event.get("host") if h.fan_out else h.name})
                if no_gpu and not readings:
                    return   # every node said it has no GPU readings: not asked again
            except Exception:  # noqa: BLE001 - a broken link: reconnect, as the chief's agent does
                pass
            finally:
                with self._lock:
                    self._gpu_streams.discard(stream)
                if stream is not None:
                    _quietly(stream.close)
                if transport is not None:
                    _quietly(transport.close)
            stable = time.monotonic() - began >= _STABLE_S
            delay = self._backoff[0] if stable else min(delay * 2, self._backoff[1])
            self._stop.wait(delay)

    def _session(self) -> None:
        transport = stream = None
        batch = _Batch()   # dropped if the stream breaks: the agent resends it from the offsets
        try:
            transport = self._factory()
            stream = transport.stream(self._argv(), idle_timeout=STREAM_IDLE_S)
            with self._lock:
                self._stream = stream
                self._status["connects"] += 1
                self._status["state"] = "connected"
            if self._stop.is_set():
                return
            for line in stream.stdout:
                batch = self._on_line(line, batch, stream.stdout)
                if self._stop.is_set():
                    return
            self._set(last_error="the watch agent's output ended")
        except Exception as exc:  # noqa: BLE001 - any failure means: reconnect and say why
            if not self._stop.is_set():
                self._set(last_error=f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._stream = None
                seen = getattr(getattr(stream, "stdout", None), "last_data", None)
                self._status["last_data"] = seen or self._status["last_data"]
            if stream is not None:
                _quietly(stream.close)
            if transport is not None:
                _quietly(transport.close)

    def _on_line(self, line: bytes, batch: _Batch, source) -> _Batch:
        if line.startswith(_METRIC):
            batch.metrics.append(line[len(_METRIC):].rstrip()[:-1] + b"\n")
            return batch
        try:
            ev = json.loads(line)
        except ValueError:
            return batch                     # not ours (a shell's banner): ignore
        kind = ev.get("type")
        if kind == "metrics":               # a block of raw lines follows: parsed at commit
            batch.metrics.append(_block(ev, source))
        elif kind == "log":
            task = str(ev.get("task", ""))
            if self._log_task_ok(task, batch):
                batch.logs.setdefault(task, []).append(cut_line(str(ev.get("line", ""))))
            else:
                batch.skipped[OTHER_LOGS] = batch.skipped.get(OTHER_LOGS, 0) + 1
        elif kind == "skipped":
            name = str(ev.get("file"))[:MAX_TASK_NAME + 10]
            if name in batch.skipped or len(batch.skipped) < MAX_LOG_TASKS:
                batch.skipped[name] = min(batch.skipped.get(name, 0) + _count(ev.get("count")), MAX_COUNT)
        elif kind == "offsets":
            self._commit(batch, clean_offsets(ev.get("offsets")))
            return _Batch()
        else:
            self._on_other(kind, ev)
        return batch

    def _log_task_ok(self, task: str, batch: _Batch) -> bool:
        """A name that is a file name of ours, and room for it: each task keeps a deque."""
        if not _task_name_ok(task):
            return False
        if task in batch.logs or task in self._logs:   # read without the lock: only we add
            return True
        return len(self._logs) + len(batch.logs) < MAX_LOG_TASKS

    def _on_other(self, kind, ev: dict) -> None:
        with self._lock:
            if kind == "checkpoint":
                self._checkpoints[int(ev["step"])] = dict(ev.get("meta") or {})
            elif kind == "export":
                self._exports[str(ev["name"])] = dict(ev.get("result") or {})
            elif kind == "task_exit":
                self._exits[str(ev["task"])] = int(ev["exit_code"])
            elif kind == "gpu":
                samples = self._gpu.setdefault(str(ev.get("host")), deque(maxlen=GPU_SAMPLES))
                samples.append((float(ev.get("time") or time.time()), list(ev.get("gpus") or [])))
            elif kind == "heartbeat":
                got = self._status["last_heartbeat"] = time.time()
                # The chief's clock, as (its time, our time of receipt): how long ago its last
                # step was is then told on its own clock, whatever ours says (``chief_now``).
                beat = ev.get("time")
                if isinstance(beat, (int, float)) and math.isfinite(beat):
                    self._status["chief_clock"] = (float(beat), got)
            elif kind == "error":
                self._status["last_error"] = f"watch agent: {ev.get('message')}"

    def _commit(self, batch: _Batch, offsets: dict) -> None:
        with self._lock:   # getters see the journal's offsets and the deques move together
            self._journal.commit(batch.metrics, batch.logs, batch.skipped, offsets)
            for task, lines in batch.logs.items():
                self._logs.setdefault(task, deque(maxlen=self._log_lines)).extend(lines)
            self._status["last_event"] = time.time()
        if batch.metrics:
            self._ingest(b"".join(batch.metrics))

    def _ingest(self, block: bytes) -> None:
        """Metric lines into the store; lines it cannot use are counted, never fatal: one bad
        line must not stop the monitor, nor a replay of the mirror that holds it."""
        try:
            cols, bad = parse_metric_block(block)
            self._store.add_columns(cols)
        except Exception as exc:  # noqa: BLE001 - quarantine the batch, keep watching
            bad = block.count(b"\n")
            self._set(last_error=f"metric lines quarantined: {type(exc).__name__}: {exc}"[:300])
        if bad:
            with self._lock:
                self._status["quarantined"] = self._status.get("quarantined", 0) + bad

    def _set(self, **fields) -> None:
        with self._lock:
            self._status.update(fields)


def _block(header: dict, source) -> bytes:
    """The metric lines of one ``metrics`` block: its header says how many lines and bytes
    follow. A block that does not match its header means the stream is corrupt: raise, so the
    session ends, its batch is dropped and the restarted agent sends it again."""
    size = header.get("bytes")
    if type(size) is not int or not 0 < size <= MAX_BLOCK_BYTES:
        raise ValueError(f"a metrics block of {size} bytes (at most {MAX_BLOCK_BYTES}): "
                         "the stream is corrupt; the agent is started again")
    block = source.read(size)
    if block.count(b"\n") != int(header["lines"]) or not block.endswith(b"\n"):
        raise ValueError(f"a metrics block does not match its header {header}")
    return block


def _task_name_ok(task: str) -> bool:
    return 0 < len(task) <= MAX_TASK_NAME and "/" not in task and not task.startswith(".")


def _count(value) -> int:
    return min(max(value, 0), MAX_COUNT) if type(value) is int else 0


def clean_offsets(raw) -> dict:
    """The agent's offsets that name one of our files and hold sane numbers; at most one per
    followed file. They are journaled and go back to the agent on its command line."""
    out: dict = {}
    if not isinstance(raw, dict):
        return out
    for rel, st in sorted(raw.items(), key=lambda item: item[0] != METRICS):   # metrics first
        if len(out) > MAX_LOG_TASKS:
            break
        task = rel[len("logs/"):-len(".log")] if rel.startswith("logs/") and rel.endswith(".log") else ""
        if rel != METRICS and not _task_name_ok(task):
            continue
        if not isinstance(st, dict):
            continue
        inode, offset = st.get("inode"), st.get("offset")
        if type(inode) is not int or type(offset) is not int or not (0 <= inode < 1 << 64
                                                                      and 0 <= offset < MAX_OFFSET):
            continue
        out[rel] = {"inode": inode, "offset": offset}
        if st.get("skip") is True:
            out[rel]["skip"] = True
    return out


def _quietly(fn) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - closing something already broken
        pass
