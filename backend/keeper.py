"""Keep a run going: the restart policy ``on_failure``, as a process detached from the console.

``launch()`` starts ``python -m backend keep RUN`` in a session of its own, so closing the
browser or killing the CLI leaves both training and restarts going. The keeper polls every task;
when one exits non-zero, is lost or unreachable, or the chief's metrics.jsonl stops growing for
``stall_timeout_s``, it stops every task (a survivor would only hang or abort: DESIGN fact 6),
waits ``backoff_s`` and starts a new attempt from the newest checkpoint step that EVERY worker
holds complete (each worker's own copy is full, fact 5, so no files are copied). After
``max_restarts`` the run ends ``failed`` with the failing task's traceback in ``failure.log``.

A user's stop wins: ``Run.stop`` leaves a marker file before it kills anything, and the keeper
checks that marker (not only the state file, which both sides write) before and after it acts.
"""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from backend import diagnose
from backend.checkpoints import list_checkpoints
from backend.errors import ConsoleError, RunError
from backend.harness import layout
from backend.hosts.pool import Pool
from backend.hosts.ssh import SSHOptions
from backend.launcher import STOP_MARKER, Run, TaskStatus, start_attempt
from backend.runs import RunStore

POLL_S = 1.0            # detection delay vs. CPU: one status command per host per poll
STOP_GRACE_S = 5.0      # survivors of a failed attempt are casualties: no need to wait long
KEEPER_LOG = "keeper.log"
KEEPER_PID = "keeper.pid"
KEEPER_LOCK = "keeper.lock"
FAILURE_LOG = "failure.log"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Progress:
    """The chief's metrics.jsonl as last seen: its size, when it last grew, the last step."""
    size: int = -1
    changed: float = 0.0
    last_step: int | None = None


def failure_reason(statuses: list[TaskStatus]) -> str | None:
    """Why this attempt failed, naming the task that failed first (not a collective casualty)."""
    bad = [s for s in statuses
           if s.state in ("lost", "unreachable") or (s.state == "exited" and s.exit_code != 0)]
    if not bad:
        return None
    first = sorted(bad, key=lambda s: s.diagnosis == diagnose.PEER_DIED)[0]
    detail = first.diagnosis if first.diagnosis and first.diagnosis != diagnose.PEER_DIED else ""
    return f"{first.name} {first.label}" + (f": {detail[:300]}" if detail else "")


def common_checkpoint(run: Run) -> int | None:
    """The newest step that every task holds complete; None means start from scratch."""
    steps = [{c["step"] for c in list_checkpoints(run, t.name)} for t in run.state.tasks]
    common = set.intersection(*steps) if steps else set()
    return max(common) if common else None


def stop_requested(local_dir: Path, since: float) -> bool:
    try:
        return float((local_dir / STOP_MARKER).read_text().strip() or 0) >= since
    except (FileNotFoundError, ValueError):
        return False


def keeper_pid(local_dir: Path) -> int | None:
    """The pid of the run's live keeper, or None (for ``status`` and the console)."""
    try:
        pid = int((local_dir / KEEPER_PID).read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    return pid


def start_keeper(run: Run, *, poll_s: float = POLL_S) -> int:
    """Start the keeper detached (own session, output to keeper.log); return its pid."""
    argv = [sys.executable, "-m", "backend", "--runs", str(run.store.root.resolve()), "keep",
            run.run_id, "--ssh-options", json.dumps(asdict(run.pool.options)), "--poll", str(poll_s)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(run.local_dir / KEEPER_LOG, "ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    (run.local_dir / KEEPER_PID).write_text(f"{proc.pid}\n")
    # Reap it when it ends, so a long-lived console does not collect zombies.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc.pid


class Keeper:
    """Watch one run until it is finished, failed or stopped; ``run()`` returns that phase."""

    def __init__(self, run_id: str, *, store: RunStore | None = None,
                 options: SSHOptions | None = None, poll_s: float = POLL_S, log=None) -> None:
        self.run_id, self.store = run_id, store or RunStore()
        self.pool, self.poll_s = Pool(options), poll_s
        self.log = log or (lambda msg: print(time.strftime("%H:%M:%S"), msg, flush=True))
        self.progress = Progress(changed=time.time())

    def run(self) -> str:
        local_dir = self.store.path(self.run_id)
        with open(local_dir / KEEPER_LOCK, "a") as lock:
            try:  # one keeper per run: two would restart the same failure twice
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunError(f"run {self.run_id} already has a keeper (pid {keeper_pid(local_dir)})",
                               "Nothing to do: that keeper is watching the run.") from None
            (local_dir / KEEPER_PID).write_text(f"{os.getpid()}\n")
            self.log(f"keeping run {self.run_id} (pid {os.getpid()})")
            try:
                return self._loop()
            finally:
                self.pool.close()
                (local_dir / KEEPER_PID).unlink(missing_ok=True)

    def _loop(self) -> str:
        while True:
            outcome = self.check()
            if outcome:
                self.log(f"run {self.run_id} is {outcome}; keeper exits")
                return outcome
            time.sleep(self.poll_s)

    def _attach(self) -> Run:
        return Run(self.store.load(self.run_id), self.store, self.pool)

    def check(self) -> str | None:
        """One poll: None while the run goes on, else the phase it ended in."""
        run = self._attach()
        since = run.state.attempts[-1].started if run.state.attempts else 0.0
        if not run.state.live or stop_requested(run.local_dir, since):
            return run.state.phase if not run.state.live else "stopped"
        if run.state.phase != "running":
            return None   # someone else is (re)starting it: look again next poll
        statuses = run.status()
        self._read_progress(run)
        if statuses and all(s.state == "exited" and s.exit_code == 0 for s in statuses):
            run.mirror_logs()
            self._end_attempt(run, "finished", phase="finished")
            return "finished"
        reason = failure_reason(statuses) or self._stalled(run)
        return self._recover(run, reason) if reason else None

    def _stalled(self, run: Run) -> str | None:
        limit = run.job.restart.stall_timeout_s
        idle = time.time() - self.progress.changed
        return f"stalled: no new metrics for {idle:.0f} s" if limit and idle > limit else None

    def _read_progress(self, run: Run) -> None:
        """Size and last line of the chief's metrics.jsonl, in one command."""
        chief = run.state.chief
        path = f"{chief.remote_run_dir}/{layout.METRICS}"
        try:
            result = run.transport(chief.name).run(
                ["sh", "-c", '[ -f "$1" ] && wc -c < "$1" && tail -n 1 "$1"', "sh", path], timeout=30)
        except ConsoleError:
            return   # an unreachable chief shows up in status; the stall clock keeps running
        lines = result.stdout.splitlines() if result.ok else []
        size = int(lines[0]) if lines and lines[0].strip().isdigit() else -1
        if size != self.progress.size:
            self.progress.size, self.progress.changed = size, time.time()
        try:
            last = json.loads(lines[1]) if len(lines) > 1 else {}
        except json.JSONDecodeError:
            return   # a line still being written
        if last.get("attempt") == run.state.attempt:
            self.progress.last_step = int(last["step"])

    def _end_attempt(self, run: Run, reason: str, *, phase: str) -> None:
        attempt = run.state.attempts[-1]
        if attempt.ended is None and self.progress.last_step is not None:
            attempt.last_step = self.progress.last_step
        run.finish_attempt(reason, phase=phase)

    def _recover(self, run: Run, reason: str) -> str | None:
        """Stop every task, then restart from the common checkpoint, or give up."""
        since = run.state.attempts[-1].started
        self.log(f"attempt {run.state.attempt} failed: {reason}")
        self._end_attempt(run, reason, phase="restarting")
        self._stop(run, reason)
        while True:
            if len(run.state.attempts) - 1 >= run.job.restart.max_restarts:
                return self._give_up(run, reason)
            time.sleep(run.job.restart.backoff_s)
            run = self._attach()
            if stop_requested(run.local_dir, since) or run.state.phase != "restarting":
                return run.state.phase if not run.state.live else "stopped"
            error = self._start(run)
            if error is None:
                break
            reason = error
        if stop_requested(run.local_dir, since):   # a user's stop raced our start: it wins
            self._stop(run, "stopped during a restart", phase="stopped")
            return "stopped"
        return None

    def _stop(self, run: Run, reason: str, *, phase: str = "restarting") -> None:
        try:
            run.stop(grace_s=STOP_GRACE_S, reason=reason, phase=phase)
        except ConsoleError as err:
            # Restarting next to leftovers would fight over TF ports; start_attempt will tell.
            self.log(f"stop after failure left something behind: {err}")

    def _start(self, run: Run) -> str | None:
        """Start the next attempt; return None, or why it failed to start."""
        step = common_checkpoint(run)
        self.log(f"starting attempt {run.state.attempt + 1} from "
                 f"{'step ' + str(step) if step else 'scratch'}")
        try:
            start_attempt(run, resume_step=step)
        except ConsoleError as err:
            reason = f"failed to start: {err}"[:600]
            self.log(f"attempt {run.state.attempt} {reason}")
            run.state.attempts[-1].reason = reason
            run.state.phase = "restarting"
            run.store.save(run.state)
            return reason
        self.progress = Progress(changed=time.time())
        return None

    def _give_up(self, run: Run, reason: str) -> str:
        """End as failed, with the failing tasks' tracebacks kept beside the state file."""
        try:
            failing = [s for s in run.status() if s.state != "exited" or s.exit_code != 0]
        except ConsoleError:
            failing = []
        # The task that failed first, not the peers whose collective it aborted.
        first = [s for s in failing if s.diagnosis != diagnose.PEER_DIED] or failing
        tails = [f"==> {s.name} ({s.label}) <==\n{traceback_tail(run.log_tail(s.name))}" for s in first]
        (run.local_dir / FAILURE_LOG).write_text(
            f"gave up after {run.job.restart.max_restarts} restart(s): {reason}\n"
            "Fix the cause shown below, then launch again (or restore from a checkpoint).\n\n"
            + "\n".join(tails))
        self.log(f"giving up after {run.job.restart.max_restarts} restart(s): {reason}")
        if stop_requested(run.local_dir, run.state.attempts[-1].started):
            return "stopped"
        run.state.phase = "failed"
        run.store.save(run.state)
        return "failed"


def traceback_tail(log: str, max_lines: int = 60) -> str:
    """The last traceback in a log and what follows it, or the log's last lines."""
    start = log.rfind("Traceback (most recent call last)")
    lines = (log[start:] if start >= 0 else log).splitlines()
    return "\n".join(lines[-max_lines:]) + "\n"
