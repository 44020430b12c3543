"""One live run as the console holds it: the Run handle, its monitor and metrics, and a lock.

No Streamlit here. A ``LiveRun`` is shared by every browser session (it lives in a
``st.cache_resource`` registry), so everything it changes goes through its lock, and the
monitor's background thread only fills the thread-safe ``MetricsStore`` and its own getters.

Why one file of this size: the console's shared state of a live run (``LiveRun``), its start-up
progress and the registry that shares both across browser sessions go through one lock discipline;
keeping them together keeps that discipline in one place.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from backend.client.harness.contract import layout, train_info
from backend.errors import ConsoleError, RunError
from backend.hosts import remote
from console.background import Actions
from backend.hosts.ssh import SSHOptions
from backend.runs.launcher import attach
from backend.watch.logcopy import LogCopier, local_copy
from backend.records.outcome import TaskPhase, TaskStatus
from backend.runs.handle import SAVE_GRACE_S, Run
from backend.watch.metrics import MetricsStore
from backend.runs.store import RunStore
from backend.records.state import Phase
from backend.client.harness.contract import watch as agent

CAUGHT_UP_S = 3.0     # the agent's heartbeat comes every 2 s: this long with no event = caught up
STATUS_EVERY_S = 2.0   # a status check starts one small process per host: not every rerun
TEND_EVERY_S = 5.0     # how often the registry looks at the runs it watches, page open or not
KEEP_RUNS = 4          # runs held beyond those in use: each holds a metrics store and connections
IN_USE_S = 300.0       # a run a page showed this recently is never let go (its panels still draw)
# train.json is written by the harness, KerasCallback and tfconsole.Loop as they start, before the
# attempt's first metrics line, and never by a command job that only calls tfconsole.report. So
# a miss is most likely for good: ask again after TRAIN_INFO_RETRY_S, doubling up to
# TRAIN_INFO_MAX_S (a remote command on every 2 s redraw, for the run's whole life).
TRAIN_INFO_RETRY_S = 2.0
TRAIN_INFO_MAX_S = 300.0


class LiveRun:
    """A run handle plus what the console keeps about it between reruns."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.lock = threading.RLock()          # actions that change the run's state
        # The watch's own lock: pages start the watch on every run, and must never wait for an
        # action that holds ``lock`` for minutes (an export) - that froze the page after a click.
        self._watch_lock = threading.Lock()
        self.metrics = MetricsStore()
        self.monitor = None
        self.copier: LogCopier | None = None
        self.statuses: list[TaskStatus] = []
        self._read_live = True   # whether self.statuses were read while the run was live
        self.status_error = ""
        self._status_at = 0.0
        self._train_info: dict | None = None
        self._train_attempt = -1
        self._train_miss = (-1, 0.0, 0.0)   # (attempt, when to ask again, the wait that gave it)
        self._versions: tuple[int, dict] | None = None   # (attempt, task -> versions)
        self.used = time.time()   # when a page last showed it: the registry keeps the recent ones

    def touch(self) -> None:
        """A page shows this run (its timed panels call this too, not only full reruns)."""
        self.used = time.time()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def ensure_monitor(self):
        """Start the watch agent once; a new store replays the local mirror from offset 0. Not
        while a launch has yet to put the harness (and the agent with it) on the chief: a status
        answer says it is there (the console's start waits for that, ``actions._follow_start``)."""
        with self._watch_lock:
            if self.run.state.phase == Phase.LAUNCHING and not self.statuses:
                return self.monitor
            if self.monitor is None or (not self.monitor.running and self.run.state.live):
                self.monitor = self.run.monitor(self.metrics).start()   # replays the mirror first
                if self.run.state.live:   # the logs the agent cannot see, copied as they grow
                    if self.copier is not None:   # a restarted watch: its copier's thread and pool go
                        self.copier.stop()
                    self.copier = LogCopier(self.run).start()
            return self.monitor

    def close(self) -> None:
        with self._watch_lock:
            if self.monitor is not None:
                self.monitor.stop()
                self.monitor = None
            if self.copier is not None:
                self.copier.stop()
                self.copier = None
        self.run.pool.close()   # a later use opens a connection again (a page still drawing it)

    def log_lines(self, task: str, n: int = 1000) -> list[str]:
        """A task's last lines: as the watch agent streams them, else from the local copy."""
        if self.monitor is not None and task in self.monitor.log_tasks():
            return self.monitor.logs(task)
        path = local_copy(self.run, task)
        return _last_lines(path, n) if path is not None else []

    def refresh(self, *, force: bool = False) -> list[TaskStatus]:
        """Task states, at most every STATUS_EVERY_S; records the run's end when its tasks end
        (``Run.settle``, as every reader does). An ended run is read once, then not polled.

        Never waits on an action in progress (export, restore): it then returns the last states.
        """
        if not force and time.time() - self._status_at < STATUS_EVERY_S:
            return self.statuses
        self._rest_monitor()
        if not self.lock.acquire(blocking=force):
            return self.statuses
        try:
            self._status_at = time.time()
            self.reload()
            # Read again once after it ended: tasks read while it was stopping do not know who
            # stopped it yet (outcome.stopped_by), nor what a stop that ran since left.
            if not self.run.state.live and self.statuses and not self._read_live and not force:
                return self.statuses
            try:
                found = self.run.settle() or self.run.status()
                if self.run.state.phase == Phase.LAUNCHING:
                    # A host not answering yet is the launch's to report (it fails if so); its
                    # harness may simply not be unpacked there yet.
                    found = [s for s in found if s.state != TaskPhase.UNREACHABLE]
                self.statuses = found
                self._read_live = self.run.state.live
                self.status_error = ""
            except ConsoleError as err:
                self.status_error = str(err)
            return self.statuses
        finally:
            self.lock.release()

    def _rest_monitor(self) -> None:
        """An ended run's files stop changing: once its watch agent has sent a heartbeat with
        nothing new for CAUGHT_UP_S, stop it; what it brought stays (store, logs)."""
        m = self.monitor
        if m is None or self.run.state.live or not m.running:
            return
        st = m.status()
        beat, event = st.get("last_heartbeat"), st.get("last_event")
        if beat and (event is None or beat - event > CAUGHT_UP_S):
            m.stop()

    def reload(self) -> None:
        """Take the saved state: a keeper, the CLI or another console may have changed it."""
        try:
            self.run.state = self.run.store.load(self.run_id)
        except ConsoleError as err:
            self.status_error = str(err)

    def stage(self) -> str:
        """Where a starting run is, from the task states last read (``refresh``), until its
        first metrics arrive; "" after that."""
        detailed = self.run.engine.reports_start_stages and self.run.state.job.get("kind") == "harness"
        return start_stage(self.run.state.phase, self.statuses, chief=self.run.state.chief.name,
                           has_metrics=self.metrics.progress() is not None, detailed=detailed)

    def task_versions(self) -> dict[str, dict]:
        """Each task's TensorFlow and Keras versions, read once per attempt (when a NaN shows)."""
        attempt = self.run.state.attempt
        if self._versions is None or self._versions[0] != attempt:
            from backend.diagnosis import health
            self._versions = (attempt, health.task_versions(self.run))
        return self._versions[1]

    def train_info(self) -> dict | None:
        """The chief's train.json (total_steps, steps_per_epoch, ...), read once per attempt;
        while it is missing (or unreadable), asked again only after a doubling wait."""
        attempt = self.run.state.attempt
        if self._train_info is not None and self._train_attempt == attempt:
            return self._train_info
        if self._train_miss[0] == attempt and time.time() < self._train_miss[1]:
            return self._train_info
        try:
            info = train_info.parse(remote.read_file(self.run.remote(self.run.state.chief.name),
                                                     layout.TRAIN_INFO, timeout=10))
        except ConsoleError:
            info = None
        if isinstance(info, dict) and info.get("attempt", attempt) == attempt:
            self._train_info, self._train_attempt = info, attempt
            return info
        self._missed(attempt)
        return info if isinstance(info, dict) else self._train_info   # an older attempt's, as before

    def _missed(self, attempt: int) -> None:
        last_attempt, _, wait = self._train_miss
        wait = min(wait * 2, TRAIN_INFO_MAX_S) if last_attempt == attempt else TRAIN_INFO_RETRY_S
        self._train_miss = (attempt, time.time() + wait, wait)


def _last_lines(path, n: int) -> list[str]:
    """The last ``n`` lines, each cut as the watch agent cuts them (the page redraws them every
    2 s: 1 MB lines kept the console busy)."""
    with open(path, "rb") as fh:   # from the end: logs get big
        fh.seek(max(0, fh.seek(0, 2) - n * 512))
        return [agent.cut_line(line) for line in fh.read().decode("utf-8", "replace").splitlines()[-n:]]


def require_live(run: Run, action: str) -> None:
    if not run.state.live:
        raise RunError(f"run {run.run_id} is {run.state.phase}, not live, so it cannot {action}.",
                       "Pick a live run on the Runs page, or start a new one on the Launch page.")


def stop(live: LiveRun, grace_s: float = 10.0, *, save: bool = False) -> int | None:
    """Stop the run; ``save``: every worker saves one step first. The step saved (else None)."""
    require_live(live.run, "be stopped")
    with live.lock:
        live.run.stop(grace_s=grace_s, save=save)
        saved = live.run.saved_step
    live.refresh(force=True)
    return saved


def begin_stop(live: LiveRun, actions: Actions, grace_s: float = 10.0, *, save: bool = False):
    """Stop in the background: the page returns at once and shows the action's progress.
    ``save``: every worker first saves the step it is at (Run.stop(save=True)); the summary
    names that step, or says no save came in time (the previous checkpoint stays usable)."""
    require_live(live.run, "be stopped")

    def work(action) -> None:
        if save:
            action.say(f"every worker saves its current step, then exits (up to {SAVE_GRACE_S:.0f} s)")
        else:
            action.say(f"stopping every task (TERM, then KILL after {grace_s:.0f} s)")
        saved = stop(live, grace_s, save=save)
        action.say("no process is left on any host")
        action.summary = f"Stopped {live.run_id}: " + _saved_words(save, saved) + "no process is left on any host."
    return actions.submit("stop", live.run_id, work)


def _saved_words(save: bool, saved: int | None) -> str:
    if not save:
        return ""
    if saved is None:
        return (f"no save within {SAVE_GRACE_S:.0f} s (the previous checkpoint stays usable: "
                "Restore offers the newest); ")
    return f"saved step {saved} on every worker: Restore offers it first; "


# ---- start progress -------------------------------------------------------------------------

def start_stage(phase: str, statuses: list[TaskStatus], *, chief: str, has_metrics: bool,
                detailed: bool = True) -> str:
    """A starting run's stage in words, from what its hosts record (``spawn.status_one``: the
    task's pid file, READY, train.json), "" once metrics come or when the run is not starting.
    The stages: starting the tasks, importing TensorFlow, waiting for peers, first step.
    ``detailed``: the hosts report READY and train.json (harness tasks the direct engine started);
    else every task running is as far as it goes."""
    if has_metrics or phase not in (Phase.LAUNCHING, Phase.RUNNING):
        return ""
    if any(s.state not in (TaskPhase.STARTING, TaskPhase.RUNNING) for s in statuses):
        return ""   # ended before step 1, queued, not answering: the task table says so
    if not statuses:   # none read yet: only a launch is known to be starting
        return "starting the tasks on every host" if phase == Phase.LAUNCHING else ""
    running = [s for s in statuses if s.state == TaskPhase.RUNNING]
    if len(running) < len(statuses):
        return f"starting the tasks on every host ({', '.join(s.name for s in statuses if s not in running)})"
    if not detailed:
        return "every task runs; waiting for the job's first metrics"
    importing = [s.name for s in running if not s.ready]
    if importing:
        return f"importing TensorFlow ({', '.join(importing)})"
    if not any(s.set_up for s in running if s.name == chief):
        return "waiting for peers: every task has TensorFlow loaded, the workers are connecting"
    return "first step: the workers are connected and set up, the first metrics come after step 1"


# ---- progress -------------------------------------------------------------------------------

@dataclass
class Progress:
    step: int | None = None
    total: int | None = None
    epoch: int | None = None
    epochs: int | None = None
    eta_s: float | None = None
    steps_per_s: float | None = None

    @property
    def fraction(self) -> float:
        if not self.step or not self.total:
            return 0.0
        return max(0.0, min(1.0, self.step / self.total))

    def text(self) -> str:
        if self.step is None:
            return "waiting for the first metrics..."
        parts = [f"step {self.step}" + (f" / {self.total}" if self.total else "")]
        if self.epoch is not None:
            parts.append(f"epoch {self.epoch}" + (f" / {self.epochs}" if self.epochs else ""))
        if self.steps_per_s:
            parts.append(f"{self.steps_per_s:.1f} steps/s")
        if self.eta_s is not None:
            parts.append("ETA " + format_duration(self.eta_s))
        return " · ".join(parts)


def progress(steps: np.ndarray, times: np.ndarray, info: dict | None, *, window: int = 20) -> Progress:
    """Step, epoch and ETA from the global-loss series (steps, wall times) and train.json."""
    out = Progress()
    if len(steps):
        out.step = int(steps[-1])
    if info:
        out.total = info.get("total_steps")
        out.epochs = info.get("epochs")
        spe = info.get("steps_per_epoch")
        if out.step is not None and spe:
            out.epoch = min(out.step // spe + (1 if out.step % spe else 0), out.epochs or 10**9) or 1
    recent = slice(-window, None)
    s, t = np.asarray(steps[recent], dtype=float), np.asarray(times[recent], dtype=float)
    ok = np.isfinite(t)
    s, t = s[ok], t[ok]
    if len(s) >= 2 and t[-1] > t[0]:
        out.steps_per_s = float((s[-1] - s[0]) / (t[-1] - t[0]))
        if out.total and out.step is not None and out.steps_per_s > 0:
            out.eta_s = max(0.0, (out.total - out.step) / out.steps_per_s)
    return out


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def step_times(store: MetricsStore) -> tuple[np.ndarray, np.ndarray]:
    """(steps, wall times) of the first task (the chief reports every worker at once)."""
    tasks = store.tasks()
    if not tasks:
        return np.empty(0, np.int64), np.empty(0)
    s = store.series(tasks[0])
    return s.step, s.time


# ---- the registry -------------------------------------------------------------------------

@dataclass
class Registry:
    """Run id -> LiveRun, for one runs folder. Shared across sessions; safe from any thread."""
    store: RunStore
    options: SSHOptions = field(default_factory=SSHOptions)
    actions: Actions = field(default_factory=Actions)   # Start, Stop, ..., in threads of their own
    _runs: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: threading.Event = field(default_factory=threading.Event)
    _tender: threading.Thread | None = None

    keep_runs: int = KEEP_RUNS
    in_use_s: float = IN_USE_S

    def put(self, run: Run) -> LiveRun:
        with self._lock:
            live = self._runs.get(run.run_id)
            if live is None:
                live = self._runs[run.run_id] = LiveRun(run)
            live.touch()
            self._start_tending()
            dropped = self._over_bound()
        _close_all(dropped)
        if live.run is not run:   # held since its record appeared (a start's early watch): that
            live.reload()         # handle stays, its watch uses it; this one's connections go
            run.pool.close()
        return live

    def get(self, run_id: str) -> LiveRun:
        """The held run, or one reattached from its saved state (raises RunError if none)."""
        with self._lock:
            live = self._runs.get(run_id)
            if live is None:
                live = self._runs[run_id] = LiveRun(attach(run_id, store=self.store, options=self.options))
            live.touch()
            self._start_tending()
            dropped = self._over_bound()
        _close_all(dropped)
        return live

    def held(self) -> list[str]:
        """The run ids held now, most recently shown first."""
        with self._lock:
            return [r.run_id for r in sorted(self._runs.values(), key=lambda r: -r.used)]

    def _over_bound(self) -> list[LiveRun]:
        """Let go of the least recently shown runs past ``keep_runs`` (under ``_lock``): never
        one shown within ``in_use_s`` or with an action going. A run let go is attached again,
        its metrics replayed from the local mirror, the next time a page asks for it."""
        now = time.time()
        spare = sorted((r for r in self._runs.values()
                        if now - r.used >= self.in_use_s and not self._acting(r.run_id)),
                       key=lambda r: r.used)
        dropped = spare[:max(0, len(self._runs) - self.keep_runs)]
        for live in dropped:
            del self._runs[live.run_id]
        return dropped

    def _acting(self, run_id: str) -> bool:
        action = self.actions.get(run_id)
        return action is not None and not action.done

    def _start_tending(self) -> None:
        if self._tender is None or not self._tender.is_alive():   # first use, or used again after close
            self._closed.clear()
            self._tender = threading.Thread(target=self._tend_forever, name="registry-tender", daemon=True)
            self._tender.start()

    def _tend_forever(self) -> None:
        while not self._closed.wait(TEND_EVERY_S):
            self.tend()

    def tend(self) -> None:
        """Settle each watched run and rest the watch agent of an ended one, whether or not a
        page asks: an agent must not outlive its run because nobody had Monitor open."""
        with self._lock:
            watched = [live for live in self._runs.values() if live.monitor is not None and live.monitor.running]
        for live in watched:
            try:
                live.refresh()   # throttled; never waits on an action in progress
            except Exception:  # noqa: BLE001 - the next round tries again; pages show the error
                pass

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for live in self._runs.values():
                live.close()
            self._runs.clear()


def _close_all(dropped: list[LiveRun]) -> None:
    """Stop the watch, log copier and connections of runs the registry let go (outside its lock:
    stopping a copier can take seconds)."""
    for live in dropped:
        try:
            live.close()
        except Exception:  # noqa: BLE001 - a run let go must not break the page that asked for another
            pass
