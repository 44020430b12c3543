"""Keep a run going: the restart policy ``on_failure``, as a process detached from the console.
A run with a webhook and no restarts gets a keeper too, which only settles it as any reader
would (``Run.settle``): its end and a NaN loss are told with no console or CLI open.

``launch()`` starts ``python -m backend keep RUN`` in a session of its own, so closing the
browser or killing the CLI leaves both training and restarts going. Each poll reads every task,
lets ``outcome.conclude`` judge the attempt and ``records.decision`` decide what to do (pure: the
keeper passes in what it saw, its clocks and the policy, and carries the decision out here):

- finished: the run is finished; failed (a task exited non-zero or vanished), or stalled: no
  sign of life for ``stall_timeout_s`` (no new metrics, no task's log grew, no task's processes
  used CPU: ``outcome.LifeWatch``), so a job that writes no metrics is not taken for a hung one:
  every task is stopped (a survivor would only hang or abort), and after
  ``backoff_s`` a new attempt starts from the newest checkpoint step that EVERY task holds and
  TensorFlow can read whole (``restorable``: a damaged one is moved aside and named);
- unknown (a host did not answer): nothing is touched; the host is asked again, less and less
  often, for ``unreachable_grace_s``, and only then counts as a failure. A host whose key CHANGED
  answered (``HostKeyChanged``): the run is held as it is, saying both fingerprints and the fix,
  for as long as it lasts; it is never silence, so never gone.

A host unanswered over SSH for ``host_gone_s`` (each poll and each stop listen) is gone for good:
the failed attempt's stop no longer waits for it, the attempt records it lost, and the next
attempt moves its tasks to the cluster's spares (``membership``), resumed from the newest
checkpoint any task holds; with no spare left the run fails saying what would have saved it.

After ``max_restarts`` restarts, or a failure that no restart can cure, the run ends ``failed``
with the failing task's traceback in ``failure.log``. A user's Stop wins: every phase change is
a compare-and-set under the run's lock, and the keeper leaves as soon as it sees ``stopping``.
No error ends the keeper, but two, each instead of a keeper that polls forever over a run that
says ``running`` or ``restarting``: a run it cannot load (its job module gone, a damaged record)
LOAD_TRIES polls in a row ends it ``failed`` ("keeper cannot load the run: ..."); a next attempt
that cannot start (a host's run folder gone, as after a reboot that emptied /tmp, or a host that
does not answer) for as long as a host has to answer (the longer of ``unreachable_grace_s`` and
``host_gone_s``) ends it ``failed`` saying why. Every other error is logged, and the next poll
tries again.

Why one file of this size: the keeper's one class carries out what ``records.decision`` decides
(stop the attempt, back off, start the next one, hold, move to a spare, log why); its methods share
one poll loop's state (the attempt under way, its clocks, the life watch), so they stay together.
The decisions themselves, the part worth testing as tables, live outside it.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass

from backend.alerts import outbox
from backend.client.harness.contract import metric_line
from backend.hosts import remote
from backend.diagnosis import stacks
from backend.runs.attempts import begin_attempt
from backend.errors import ConsoleError, DiskFullError, RunError
from backend.client.harness.contract import layout
from backend.hosts.pool import Pool
from backend.hosts.ssh import SSHOptions
from backend.engines.bundle import harness_bundle
from backend.runs import failure_log, membership, restorable
from backend.runs.goodput import LiveAlert
from backend.runs.detached import FAILURE_LOG, KEEPER_LOCK, POLL_S, keeper_pid, write_pid
from backend.hosts.pool import parallel
from backend.hosts.tasks import by_host
from backend.records.decision import (Clocks, Decision, Kind, Membership, Seen, advance, decide,
                                      decide_membership, decide_restart, decide_start_failure, gone)
from backend.records.outcome import Conclusion, LifeWatch, Signs, TaskPhase, Verdict, conclude
from backend.runs.handle import Run
from backend.runs.keeper_log import KeeperLog
from backend.runs.store import RunStore
from backend.records.state import UNDERWAY, Phase
from backend.files import room
from backend.watch.chief_metrics import local_last_step

STOP_GRACE_S = 5.0      # survivors of a failed attempt are casualties: no need to wait long
MAX_POLL_S = 10.0       # the slowest poll while a host does not answer
# Polls in a row that cannot load the run before the keeper gives up on it: the state file is
# replaced whole (never seen half written), so a load that fails this often will not heal.
LOAD_TRIES = 5


@dataclass
class MetricsSeen:
    """The last step in the chief's metrics.jsonl, for the attempt's record."""
    last_step: int | None = None


class Keeper:
    """Watch one run until it is finished, failed or stopped; ``run()`` returns that phase."""

    def __init__(self, run_id: str, *, store: RunStore | None = None,
                 options: SSHOptions | None = None, poll_s: float = POLL_S, log=None) -> None:
        self.run_id, self.store = run_id, store or RunStore()
        self.pool, self.poll_s = Pool(options), poll_s
        self.log = log or KeeperLog()   # never raises: a full disk must not end the keeper
        self.progress = MetricsSeen()
        self.life = LifeWatch(changed=time.time())
        self.clocks = Clocks(time.time())   # since when a host does not answer, a casualty shows
        self.silent: dict[str, float] = {}   # host -> since when it has not answered over SSH
        self.restart_failing_since: float | None = None   # the next attempt has not started since
        self.full_since: float | None = None   # the console's disk has had no room since
        self.delay = poll_s
        self.goodput: LiveAlert | None = None   # alerts.goodput_below while the run lives

    def run(self, *, take_over: bool = False) -> Phase:
        """Keep the run until it ends. ``take_over``: a keeper still holds the run (a restore's stop
        has not reached it yet, or it went on to keep the new attempt): wait for it to exit, then
        keep the run, instead of refusing."""
        local_dir = self.store.path(self.run_id)
        with open(local_dir / KEEPER_LOCK, "a") as lock:
            try:  # one keeper per run: two would restart the same failure twice
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not take_over:
                    raise RunError(f"run {self.run_id} already has a keeper (pid {keeper_pid(local_dir)})",
                                   "Nothing to do: that keeper is watching the run.") from None
                self.log(f"run {self.run_id} still has its keeper from before the restore: "
                         "waiting for it to exit, then keeping the run")
                fcntl.flock(lock, fcntl.LOCK_EX)
            write_pid(local_dir, os.getpid())   # a full disk: found by its lock (keeper_pid)
            self.log(f"keeping run {self.run_id} (pid {os.getpid()})")
            # The pid file stays when it exits: the lock goes with this block, but the process
            # lives on a moment (closing, the interpreter's exit), and a Stop's ``end_keeper``
            # must find it until it is gone, or "nothing left" is checked too early (a keeper
            # seen running right after a stop). ``keeper_pid`` passes over a pid that has ended.
            try:
                with _term_ends_the_loop():
                    return self._loop()
            except _Terminated:   # a Stop's end_keeper, or an operator's kill: say why we leave
                return self._leave_on_term()
            finally:
                self.pool.close()

    def _leave_on_term(self) -> Phase:
        try:
            phase = self.store.load(self.run_id).phase
        except ConsoleError as err:
            self.log(f"run {self.run_id}: keeper ends on TERM (its record does not read: {err})")
            return Phase.STOPPED
        self.log(f"run {self.run_id} is {phase}; keeper exits (ended by TERM)")
        return Phase(phase)

    def _loop(self) -> Phase:
        load_failures = 0
        while True:
            if self._no_room():   # nothing it did could be recorded: hold the run as it is
                time.sleep(self.delay)
                continue
            try:
                run = self._attach()
            except ConsoleError as err:
                if not (self.store.path(self.run_id) / layout.STATE).exists():
                    self.log(f"run {self.run_id}'s record is gone (deleted); keeper exits")
                    return Phase.STOPPED   # nothing left to keep: its folder was removed
                load_failures += 1
                self.log(f"cannot load run {self.run_id} ({load_failures}/{LOAD_TRIES}): {err}")
                if load_failures >= LOAD_TRIES:
                    return self._unloadable(err)
                time.sleep(self.delay)
                continue
            load_failures = 0
            try:
                outcome = self.check(run)
            except DiskFullError as err:   # filled since _no_room looked: every record is whole
                outcome = None
                self._disk_full(err)
            except ConsoleError as err:
                outcome = None
                if not (self.store.path(self.run_id) / layout.STATE).exists():
                    self.log(f"run {self.run_id}'s record is gone (deleted); keeper exits")
                    return Phase.STOPPED   # nothing left to keep: its folder was removed
                self.log(f"poll failed, trying again: {err}")
            except Exception:   # noqa: BLE001 - a keeper that dies leaves its run unwatched
                outcome = None
                self.log("unexpected error, trying again:\n" + traceback.format_exc())
            if outcome:
                self.log(f"run {self.run_id} is {outcome}; keeper exits")
                return outcome
            time.sleep(self.delay)

    def _no_room(self) -> bool:
        """Whether the console's disk lacks room for the keeper's records (``store.room``): then
        it says so once and looks again, less and less often; when room is back, it goes on."""
        full = room(self.store.path(self.run_id))
        if full:
            self._disk_full(full)
        elif self.full_since is not None:
            self.log(f"room again on the console machine's disk after {time.time() - self.full_since:.0f} s: "
                     f"keeping run {self.run_id} again")
            self.full_since, self.delay = None, self.poll_s
            # The time it could not look is no stall, no silence and no failing restart.
            self.life, self.clocks = LifeWatch(changed=time.time()), Clocks(time.time())
            self.restart_failing_since, self.silent = None, {}
        return bool(full)

    def _disk_full(self, err: DiskFullError) -> None:
        self.delay = min(MAX_POLL_S, self.delay * 2)
        if self.full_since is not None:
            return
        self.full_since = time.time()
        self.log(f"{err.problem}; holding run {self.run_id} as it is (nothing started, stopped or "
                 "recorded) and looking again for room")
        try:
            attempt = self.store.load(self.run_id).attempt
        except ConsoleError:
            attempt = 0
        outbox.on_disk_full(self.store.path(self.run_id), self.run_id, problem=err.problem,
                            attempt=attempt, log=self.log)

    def _attach(self) -> Run:
        return Run(self.store.load(self.run_id), self.store, self.pool)

    def _unloadable(self, err: ConsoleError) -> Phase:
        """Give up on a run that cannot be loaded: record it failed if its record still reads."""
        reason = f"keeper cannot load the run: {err}"
        (self.store.path(self.run_id) / FAILURE_LOG).write_text(
            f"{reason}\nNothing restarts this run any more; launch it again.\n")
        try:
            phase = self.store.move(self.run_id, Phase.FAILED, reason=reason,
                                    when=lambda state: state.live and state.phase != Phase.STOPPING)[0].phase
        except ConsoleError as damaged:
            self.log(f"cannot record the run failed either ({damaged}); keeper exits")
            return Phase.FAILED
        self.log(f"{reason}; the run is {phase}; keeper exits")
        return Phase(phase)

    def check(self, run: Run | None = None) -> Phase | None:
        """One poll: None while the run goes on, else the phase it ended in."""
        run = run or self._attach()
        if run.state.launch_cut_off():   # a restore that was cut off while starting the tasks
            run.settle()
            return None
        phase = run.state.phase
        if not run.state.live or phase == Phase.STOPPING:
            return phase
        if phase == Phase.LAUNCHING:
            return None   # launch or restore is starting it: look again next poll
        if phase == Phase.RESTARTING:   # our restart is under way, or a keeper died mid-way
            return self._restart(run)
        self.goodput = self.goodput or LiveAlert(run.local_dir)
        self.goodput.check(run, time.time())
        if not run.kept:   # watched for its alerts only: settle as any reader, restart nothing
            self._read_progress(run)
            run.settle()
            return None if run.state.live else run.state.phase
        statuses = run.status()
        self._hear({s.host for s in statuses if s.state != TaskPhase.UNREACHABLE or s.key_change},
                   {s.host for s in statuses if s.state == TaskPhase.UNREACHABLE and not s.key_change})
        found = conclude(statuses)
        self._tick(found)
        idle = self._look_for_life(run) if found.verdict == Verdict.GOING else None
        decision = decide(Seen(found, tuple(statuses), idle, tuple(t.name for t in run.state.tasks)),
                          self.clocks, run.job.restart)
        return self._carry_out(run, found, decision)

    def _tick(self, found: Conclusion) -> None:
        """Move the clocks on to this poll's verdict; say when every host answers again."""
        before, self.clocks = self.clocks, advance(self.clocks, found, time.time())
        if before.unreachable_since is not None and self.clocks.unreachable_since is None:
            self.log(f"every host answers again after {self.clocks.now - before.unreachable_since:.0f} s")

    def _look_for_life(self, run: Run) -> float | None:
        """How long the run has shown no sign of life (None while it waits in the scheduler's
        queue: that is no stall, and the stall clock starts at the start)."""
        if run.state.phase == Phase.QUEUED:
            self.life = LifeWatch(changed=time.time())
            return None
        self._read_progress(run)
        if run.job.restart.stall_timeout_s:
            self._read_life(run)
        return self.life.idle(time.time())

    def _carry_out(self, run: Run, found: Conclusion, decision: Decision) -> Phase | None:
        """Do what the poll's decision says; None while the run goes on, else its end."""
        self.delay = min(MAX_POLL_S, self.delay * 2) if decision.back_off else self.poll_s
        if decision.note:
            self.log(decision.note)
        if decision.kind == Kind.FINISHED:
            if decision.stop_rest and not self._stop_rest(run, decision.reason):
                return None   # the next poll tries again
            self._read_progress(run)
            run.conclude_attempt(found, expect=UNDERWAY, last_step=self._newest_step(run))
            return None if run.reload().live else run.state.phase
        if decision.kind == Kind.PREEMPTED:
            return self._preempted(run)
        if decision.kind in (Kind.END_ATTEMPT, Kind.GIVE_UP):
            reason = decision.reason + (self._save_stacks(run) if decision.stalled else "")
            return self._recover(run, reason, give_up=decision.why)
        return None   # go on, or hold the run as it is (WAIT)

    def _stop_rest(self, run: Run, reason: str) -> bool:
        """Stop the tasks that run on after the chief finished (they only shut down); whether the
        stop was clean, so the attempt can be recorded finished."""
        self.log(f"attempt {run.state.attempt} {reason}")
        report = run.stop_attempt(grace_s=STOP_GRACE_S)
        if not report.clean:
            self.log(f"stop after the chief finished left something on {', '.join(sorted(report.errors))}; "
                     "trying again next poll")
        return report.clean

    def _save_stacks(self, run: Run) -> str:
        """Before anything is stopped: where each worker hangs is the only clue to why a run
        stalled. What the reason adds: where the stacks are."""
        found, folder = stacks.dump_and_save(run, label=f"stall-attempt-{run.state.attempt}")
        in_job = [s.task for s in found if s.in_job_code]
        self.log(f"stalled: stacks of every task saved in {folder}"
                 + (f"; stuck in the job's own code: {', '.join(in_job)}" if in_job else "")
                 if folder else f"stalled: no stacks ({found[0].error if found else 'no tasks'})")
        return f"; stacks in {layout.STACKS}/{folder.name}/" if folder else ""

    def _newest_step(self, run: Run) -> int | None:
        """The attempt's last step, read as it ends (an earlier read can be many steps behind, as
        when a host stopped answering): the newest of what this keeper saw, the chief's metrics
        now (unless its host is silent) and the console's local copy of them."""
        seen = [self.progress.last_step, local_last_step(run.local_dir, run.state.attempt)]
        if run.state.chief.host not in self.silent:
            seen.append(run.last_step())
        steps = [s for s in seen if s is not None]
        return max(steps) if steps else None

    def _read_progress(self, run: Run) -> None:
        """Size and last line of the chief's metrics.jsonl, in one command."""
        try:
            found = remote.progress(run.remote(run.state.chief.name))
        except ConsoleError:
            self.life.changed = time.time()   # an unreachable chief is judged by its grace
            return
        self.life.observe(time.time(), metrics_size=-1 if found.size is None else found.size)
        try:
            last = metric_line.parse(json.loads(found.last_line or "{}"))
        except ValueError:
            return   # not a metrics record (the monitor quarantines such lines)
        if last is not None and last.attempt == run.state.attempt:
            self.progress.last_step = last.step
            bad = metric_line.first_nonfinite(last)
            if bad:
                outbox.on_nonfinite(run.local_dir, run.run_id, attempt=run.state.attempt,   # once
                                    step=last.step, metric=bad[0], value=bad[1])

    def _read_life(self, run: Run) -> None:
        """Every task's CPU time and log size, one command per host, all hosts at once."""
        groups = [(g.name, g) for g in by_host(run.state.tasks, run.cluster)]
        answers = parallel(lambda g: remote.liveness(g.host(run.pool), g.names), groups)
        signs: dict[str, Signs] = {}
        for key, group in groups:
            if isinstance(answers[key], Exception):
                # What cannot be seen is not taken for a hang: an unreachable host has its grace.
                self.log(f"no signs of life from {group.spec.host}: {answers[key]}")
                self.life.changed = time.time()
                continue
            signs.update({name: Signs(a.cpu_s, a.log_size) for name, a in answers[key].items()})
        self.life.observe(time.time(), signs=signs)

    def _recover(self, run: Run, reason: str, *, give_up: str = "") -> Phase | None:
        """End the attempt, stop every task, then restart (next poll), or give up saying
        ``give_up`` (a failure no restart can cure)."""
        self.log(f"attempt {run.state.attempt} failed: {reason}")
        if not run.move(Phase.RESTARTING, when=UNDERWAY, reason=reason, last_step=self._newest_step(run)):
            return None   # someone else changed the phase: the next poll reads it
        if not self._stop_all(run):
            return Phase.STOPPING
        if give_up:
            return self._give_up(run, reason, why=give_up)
        return None   # the next poll sees `restarting` and starts the next attempt

    def _preempted(self, run: Run) -> Phase | None:
        """Every task saved one step and exited on a preemption signal: resume from it. Not a
        failure: it counts against max_preemptions, not max_restarts."""
        reason, saved = run.preemption()   # the step every task saved, from the chief's record
        self.log(f"attempt {run.state.attempt} {reason}")
        if not run.move(Phase.RESTARTING, when=UNDERWAY, reason=reason, last_step=saved):
            return None
        return None if self._stop_all(run) else Phase.STOPPING

    def _hear(self, answered: set[str], silent: set[str]) -> None:
        """Start (or keep) the silence clock of each host that did not answer; stop the others'."""
        now = time.time()
        for host in silent - answered:
            self.silent.setdefault(host, now)
        for host in answered:
            self.silent.pop(host, None)

    def _gone(self, run: Run) -> dict[str, str]:
        """Hosts unanswered for ``host_gone_s``: gone for good (host -> for how long)."""
        return gone(self.silent, time.time(), run.job.restart.host_gone_s)

    def _stop_all(self, run: Run) -> bool:
        """Stop the failed attempt's tasks, retrying an unreachable host within its grace. A host
        judged gone (``_gone``) is not waited for: the attempt records it lost (its tasks move to
        a spare next), and the stop of the others is clean."""
        deadline = time.time() + answer_bound(run)
        delay = self.poll_s
        while True:
            report = run.stop_attempt(grace_s=STOP_GRACE_S)
            hosts = {t.host for t in run.state.tasks}
            self._hear(hosts - set(report.errors), set(report.unreachable))
            if report.clean:
                return True
            gone = self._gone(run)
            if set(report.errors) <= set(gone):
                self._record_lost(run, {h: gone[h] for h in report.errors})
                return True
            if time.time() > deadline:
                hosts = sorted(report.errors)
                self.log(f"cannot stop tasks on {', '.join(hosts)} "
                         f"({'; '.join(str(report.errors[h]) for h in hosts)}); the run stays stopping")
                run.move(Phase.STOPPING, when=(Phase.RESTARTING,), unreachable=hosts)
                return False
            self.log(f"stop left something on {', '.join(sorted(report.errors))}; retrying")
            time.sleep(delay)
            delay = min(MAX_POLL_S, delay * 2)

    def _record_lost(self, run: Run, lost: dict[str, str]) -> None:
        """The attempt lost these hosts for good: its reason says so (the collective's abort on
        the others was only the echo), and the next attempt replaces them."""
        text = membership.lost_text(run, lost)
        self.log(f"host(s) gone for good: {text}")

        def mark(state) -> None:
            last = state.attempts[-1]
            last.lost, last.reason = {**(last.lost or {}), **lost}, text
        run.update(mark)

    def _replace_lost(self, run: Run, restart: Decision) -> tuple[Run, int | None] | Phase | None:
        """The last attempt lost hosts: move their tasks to spares and copy the newest checkpoint
        to whoever lacks it; (the run's new handle, the step), or the give-up's phase."""
        last, began = run.state.attempts[-1], time.time()
        lost = dict(last.lost)
        found = membership.replace_lost(run, lost)   # preflight of the new membership: ``lost`` may grow
        self.log(f"new membership chosen in {time.time() - began:.1f} s: " + "; ".join(filter(None, [
            membership.moved_text(found), found.dropped and f"without {', '.join(found.dropped)}",
            found.missing and f"no spare for {', '.join(found.missing)}"])))
        decision = decide_membership(restart, Membership(
            {m.task: m.new for m in found.moves}, tuple(found.dropped), tuple(found.missing),
            membership.reason(run, lost, found)))
        if decision.kind == Kind.GIVE_UP:
            self._set_reason(run, decision.reason, lost)
            return self._give_up(run, decision.reason, why=decision.why)
        if decision.kind in (Kind.MOVE_TO_SPARE, Kind.SHRINK):
            self._set_reason(run, decision.reason, lost)
            run = membership.apply(run, found)
        spares = {m.new for m in found.moves}
        moved = [t.name for t in run.state.tasks if t.host in spares]
        step, copies = membership.resume_step(run, moved, harness_bundle())
        if copies:
            self.log(f"copied checkpoint step {step} to {', '.join(copies)} "
                     f"({time.time() - began:.1f} s since the move began)")
        return run, step

    def _set_reason(self, run: Run, reason: str, lost: dict[str, str]) -> None:
        def change(state) -> None:
            state.attempts[-1].reason, state.attempts[-1].lost = reason, lost
        run.update(change)

    def _restart(self, run: Run) -> Phase | None:
        """Start the next attempt from the common checkpoint, or give up after max_restarts."""
        attempts = run.state.attempts
        decision = decide_restart([a.reason for a in attempts], run.job.restart,
                                  lost=list(attempts[-1].lost or {}) if attempts else [])
        if decision.kind == Kind.GIVE_UP:
            return self._give_up(run, decision.reason, why=decision.why)
        if not self._back_off(run, decision.wait_s):   # a Stop came meanwhile: leave now, before
            phase = run.state.phase                     # the Stop's end_keeper has to signal us
            return phase if not run.state.live or phase == Phase.STOPPING else None
        try:   # a host that does not answer, or its run folder gone, raises
            if decision.replace:
                moved = self._replace_lost(run, decision)
                if not isinstance(moved, tuple):
                    return moved
                run, step = moved
            else:
                step = restorable.resume_step(run, self.log)
        except ConsoleError as err:
            return self._cannot_restart(run, err)
        self.log(f"starting attempt {run.state.attempt + 1} from "
                 f"{'step ' + str(step) if step is not None else 'scratch'}")
        try:
            begin_attempt(run, resume_step=step, expect=(Phase.RESTARTING,), on_fail=Phase.RESTARTING,
                          by="keeper's restart")
        except RunError as err:
            self.log(f"not restarting: {err}")
            return None if run.reload().live else run.state.phase
        except ConsoleError as err:
            return self._cannot_restart(run, err)
        self.restart_failing_since = None
        outbox.on_restart(run.local_dir, run.state)   # the webhook hears why, once the new attempt runs
        self.progress = MetricsSeen()
        self.life, self.clocks = LifeWatch(changed=time.time()), Clocks(time.time())
        self.silent = {}
        return None

    def _back_off(self, run: Run, wait_s: float) -> bool:
        """Wait out a restart's back-off, reading the run's record at every poll: False as soon
        as the run is no longer restarting (a Stop came). Asleep for the whole back-off, the
        keeper would leave only when the Stop's ``end_keeper`` signalled it, saying nothing."""
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(self.poll_s, left))
            try:
                if run.reload().phase != Phase.RESTARTING:
                    return False
            except ConsoleError:   # unreadable a moment: the restart's own steps find out why
                pass
        return True

    def _cannot_restart(self, run: Run, err: ConsoleError) -> Phase | None:
        """The next attempt did not start: the next poll tries again, for as long as a host has to
        answer (``answer_bound``, as a stop does); then the run fails saying why. A cause that does not heal
        (the host's run folder gone) would otherwise keep the keeper, and the run's `restarting`,
        forever."""
        now = time.time()
        self.restart_failing_since = self.restart_failing_since or now
        decision = decide_start_failure(run.state.attempt + 1, str(err), now - self.restart_failing_since,
                                        answer_bound(run))
        if decision.kind == Kind.WAIT:
            self.log(decision.reason)
            return None
        return self._give_up(run, decision.reason, why=decision.why)

    def _give_up(self, run: Run, reason: str, *, why: str) -> Phase | None:
        """End as failed, with the failing tasks' tracebacks kept beside the state file."""
        failure_log.write(run, reason, why=why)
        self.log(f"{why}: {reason}")
        run.move(Phase.FAILED, when=(Phase.RESTARTING,))
        return None if run.state.live else run.state.phase


class _Terminated(BaseException):
    """TERM arrived: a BaseException, so the loop's ``except Exception`` cannot swallow it."""


class _term_ends_the_loop:
    """While the loop runs in the main thread, TERM raises ``_Terminated`` there, so the keeper
    logs why it leaves; a keeper run in a thread (tests, a sweep) keeps the default."""

    def __enter__(self):
        self.before = None
        if threading.current_thread() is threading.main_thread():
            self.before = signal.signal(signal.SIGTERM, self._raise)
        return self

    def __exit__(self, *exc) -> None:
        if self.before is not None:
            signal.signal(signal.SIGTERM, self.before)

    @staticmethod
    def _raise(signum, frame) -> None:
        raise _Terminated()


def answer_bound(run: Run) -> float:
    """How long a host has to answer a stop or a restart before the keeper gives up on it."""
    policy = run.job.restart
    return max(policy.unreachable_grace_s, policy.host_gone_s)
