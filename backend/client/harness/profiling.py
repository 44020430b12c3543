"""A profile of every worker on demand, for harness jobs, fit scripts and custom loops alike.

``tfconsole profile RUN --steps N`` leaves ``RUN/requests/profile-<id>.json`` (``{"steps": N}``)
for the chief. The chief raises N in the next sync row (column ``profile_steps``); every worker
reads the same gathered rows, so every worker starts TensorFlow's profiler after that same
step and stops it N steps later, on its own (stopping is local: no collective). Each worker
writes its traces to ``RUN/profile/step-S/<task>/`` (TensorBoard's logdir layout:
``plugins/profile/<time>/<host>.xplane.pb``) and then ``RUN/profile/step-S/<task>.json``: the
window's steps and seconds, its op time split into compute, collective communication and input,
and the top ops, read from its own trace (``summarize``). The chief answers the request with
``profile-<id>.done`` (``{"step": S, "steps": N, "dir": "profile/step-S"}``) when it starts.

A profile never costs the run: a profiler that will not start (another one is running, the
trace cannot be written) or a trace that does not parse is written into the task's summary as
``error``, and training goes on.
"""
from __future__ import annotations

import atexit
import glob
import json
import os
import time
from collections import defaultdict

from . import ckpt_index, layout

PREFIX = "profile-"
FOLDER = "profile"
DEFAULT_STEPS = 5
MAX_STEPS = 200          # a trace grows with every step: the window is bounded
TOP_OPS = 8
MAX_TRACE_BYTES = 64 * 2**20   # a trace larger than this is not parsed for the summary
# fit scripts and custom loops (client/sync.py's meeting) are not profiled: a worker of each died
# here with "double free or corruption" (exit -6) inside TensorFlow 2.21's profiler start, in
# one run in a few, while harness jobs never did; until the cause is known, they say so.
MEETING_REFUSED = ("profiles of fit scripts and custom loops are off: TensorFlow's profiler "
                   "crashed a worker of each here (double free, exit -6); harness jobs are profiled")
COLLECTIVE = ("Collective", "AllReduce", "AllGather", "Nccl", "ReduceScatter", "Broadcast")
INPUT = ("IteratorGetNext", "MultiDeviceIteratorGetNext")


def requests_of(run_dir: str) -> list[str]:
    """The profile requests waiting now, oldest first."""
    folder = os.path.join(run_dir, layout.REQUESTS)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.startswith(PREFIX) and n.endswith(".json"))


def steps_asked(requests: list[str]) -> int:
    """The longest window the waiting requests ask for, within 1..MAX_STEPS."""
    asked = []
    for path in requests:
        try:
            with open(path) as fh:
                asked.append(int(json.load(fh).get("steps") or DEFAULT_STEPS))
        except (OSError, ValueError, TypeError, AttributeError):
            asked.append(DEFAULT_STEPS)
    return max(1, min(MAX_STEPS, max(asked))) if asked else 0


def folder_of(step: int) -> str:
    return f"{FOLDER}/step-{int(step)}"


class Profiler:
    """One worker's side: ``flag()`` goes into its sync row, ``begin(step, rows' flags)`` after
    the gather, ``tick(step)`` after every step, ``close(step)`` when training ends."""

    def __init__(self, run_dir: str | None, task: str, is_chief: bool, *, refused: str | None = None) -> None:
        self.run_dir, self.task, self.is_chief = run_dir, task, is_chief
        self.refused = refused   # why this job kind is not profiled: the chief answers so
        self.seen: list[str] = []
        self.start_step = self.until = None
        self.began = 0.0
        self.error: str | None = None
        self.exit_hook = False
        self.last_step = 0

    def flag(self) -> float:
        """The chief's ask (steps), 0 on every other worker and while a window runs."""
        if not (self.is_chief and self.run_dir) or self.until is not None:
            return 0.0
        self.seen = requests_of(self.run_dir)
        if self.refused and self.seen:   # answered at once; nothing is started
            self.error = self.refused
            self._answer({"step": 0, "steps": 0, "dir": ""})
            self.error = None
            return 0.0
        return float(steps_asked(self.seen))

    def begin(self, step: int, flags, *, first: bool) -> None:
        """Start the window after ``step`` if the gathered ``flags`` ask, but never at an
        attempt's ``first`` meeting: a profiler started while a fit script's first step was still
        being traced crashed the worker (``double free or corruption``, tf_keras 2.21, seen
        here); the request waits for the next meeting, and a first step's trace would show
        tracing, not training, anyway. Every worker passes the same ``first``."""
        steps = int(max(flags, default=0.0))
        if first or steps <= 0 or self.until is not None or not self.run_dir:
            return
        self.start_step, self.until, self.began, self.error = step, step + steps, time.time(), None
        self.last_step = step
        if not self.exit_hook:   # a custom loop has no end of its own: its exit ends the window
            atexit.register(self._at_exit)
            self.exit_hook = True
        try:
            import tensorflow as tf
            tf.profiler.experimental.start(self._logdir())
        except Exception as err:  # noqa: BLE001 - a profile never ends training
            self.error = f"the profiler did not start: {type(err).__name__}: {err}"
        print(f"[{self.task}] tfconsole: profiling steps {step + 1}-{self.until}"
              + (f" failed: {self.error}" if self.error else ""), flush=True)
        if self.is_chief:
            self._answer({"step": step, "steps": steps, "dir": folder_of(step)})

    def tick(self, step: int) -> None:
        if self.until is None:
            return
        self.last_step = step   # where a window cut short by the process's exit ends
        if step >= self.until:
            self._end(step)

    def close(self, step: int) -> None:
        """Training ended inside the window: the steps profiled so far are the profile."""
        if self.until is not None:
            self._end(step)

    def _at_exit(self) -> None:
        """The process exits inside a window (a custom loop that ended): the summary says so,
        and TensorFlow's profiler is not called while the interpreter shuts down (a crash
        there would turn the job's exit code into a failure)."""
        if self.until is not None:
            if self.error is None:
                self.error = "training ended inside the profile window: no trace (profile fewer steps)"
            self._end(self.last_step)

    def _logdir(self) -> str:
        return os.path.join(self.run_dir, folder_of(self.start_step), self.task)

    def _end(self, step: int) -> None:
        seconds = time.time() - self.began
        summary: dict = {}
        if self.error is None:
            try:
                import tensorflow as tf
                tf.profiler.experimental.stop()
                summary = summarize_folder(self._logdir())
                summary["trace"] = os.path.relpath(summary["trace"], self.run_dir)
            except Exception as err:  # noqa: BLE001 - a profile never ends training
                self.error = f"the trace was not written or read: {type(err).__name__}: {err}"
        record = {"task": self.task, "start_step": self.start_step, "steps": step - self.start_step,
                  "seconds": round(seconds, 3), "error": self.error, **summary}
        try:
            ckpt_index.write_json_atomic(self._logdir() + ".json", record)
        except OSError as err:
            print(f"[{self.task}] tfconsole: profile summary not written: {err}", flush=True)
        print(f"[{self.task}] tfconsole: profile of steps {self.start_step + 1}-{step} "
              + (f"failed: {self.error}" if self.error else f"written to {self._logdir()}"), flush=True)
        self.start_step = self.until = None

    def _answer(self, body: dict) -> None:
        for req in self.seen:
            try:
                ckpt_index.write_json_atomic(req[: -len(".json")] + ".done", {**body, "error": self.error})
                os.unlink(req)
            except OSError:
                pass
        self.seen = []


def summarize_folder(logdir: str) -> dict:
    """The summary of the newest trace under ``logdir`` (``summarize`` of its XSpace)."""
    found = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not found:
        raise FileNotFoundError(f"no .xplane.pb under {logdir}")
    path = found[-1]
    size = os.path.getsize(path)
    out = {"trace": path, "trace_bytes": size}
    if size > MAX_TRACE_BYTES:
        return {**out, "error": f"trace of {size} bytes is over {MAX_TRACE_BYTES}: not summarized"}
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(path, "rb") as fh:
        space.ParseFromString(fh.read())
    return {**out, **summarize(_op_events(space))}


def _op_events(space) -> list[tuple[str, float]]:
    """(op type, seconds) of every TensorFlow op the trace holds: events named ``name:Type`` on
    the host's executor lines (runtime spans such as ``ExecutorState::Process`` are left out)."""
    out = []
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if "::" in name or ":" not in name or name.startswith("EagerLocalExecute"):
                    continue
                out.append((name.rsplit(":", 1)[1].strip(), event.duration_ps / 1e12))
    return out


def summarize(events: list[tuple[str, float]]) -> dict:
    """Op seconds split into collective communication, input and compute, and the top op types.
    Pure: (op type, seconds) pairs in, the summary's numbers out."""
    by_type: dict = defaultdict(float)
    for kind, seconds in events:
        by_type[kind] += seconds
    split = {"collective_s": 0.0, "input_s": 0.0, "compute_s": 0.0}
    for kind, seconds in by_type.items():
        key = ("collective_s" if any(k in kind for k in COLLECTIVE) else
               "input_s" if kind.startswith(INPUT) else "compute_s")
        split[key] += seconds
    top = sorted(by_type.items(), key=lambda kv: -kv[1])[:TOP_OPS]
    return {**{k: round(v, 6) for k, v in split.items()},
            "top_ops": [{"op": k, "seconds": round(v, 6)} for k, v in top]}
