"""A handle on one run: status, settle, stop, logs. Not tied to the process that launched it.

Every reader settles: ``settle()`` reads the tasks' statuses, and when the attempt has ended
(``outcome.conclude``) records how, under the run's lock. A run whose restart policy is
``on_failure`` is settled by its keeper instead; a reader that finds that keeper dead starts a
new one, so no run is left live with nothing watching it.

Why one file of this size: ``Run`` is the one handle every reader holds (the console, the CLI, the
keeper, the Python API): status, settle, stop, logs and the monitor read the same record under the
same lock, so its methods stay one class; what they decide is in records/ (outcome, decision) and
what they run on hosts in hosts/remote.py.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from backend.alerts import goodput_alerts, outbox, settings as alert_settings
from backend.runs import aftercare, detached, record
from backend.hosts import remote
from backend.engines.base import Engine, StopReport
from backend.engines import engine_for, tasks_view
from backend.errors import ConsoleError, MultiHostError, RunError
from backend.client.harness.contract import layout, metric_line, preempt
from backend.hosts.pool import Pool, make_transport
from backend.hosts.tasks import by_host, task_host
from backend.records.outcome import (PREEMPTED, REQUEUED, Conclusion, TaskPhase, TaskStatus, Verdict, all_queued,
                                  conclude, cut_off_phase, how_to_go_on, mark_stopped, preempted_reason,
                                  shown_phase, stopped_by)
from backend.runs.store import RunStore
from backend.records.state import UNDERWAY, Attempt, Phase, RunState, TaskState
from backend.access import audit
from backend.config.spec import ClusterSpec, JobSpec, RestartMode, TaskSpec

SETTLE_STOP_GRACE_S = 5.0   # survivors of a failed task only abort or hang (docs/facts.md #6)
# A user's stop: INT and TERM, KILL this long after for what still lives. Healthy TensorFlow
# workers do not end on them within seconds (docs/facts.md #10), so a longer wait only delays it.
STOP_GRACE_S = 1.0
# stop --save: how long to wait for every worker to save its step and exit (the next sync point,
# the save itself) before the plain stop goes on; the previous checkpoint stays usable.
SAVE_GRACE_S = 60.0
SAVED_ON_EVERY_WORKER = " on every worker"   # ends the reason of a stop whose save was made
EXITED_POLL_S = 1.0   # how often a save-stop asks whether every task has already exited


class Run:
    def __init__(self, state: RunState, store: RunStore, pool: Pool, engine: Engine | None = None) -> None:
        self.state, self.store, self.pool = state, store, pool
        # A Slurm run's tasks are seen through its login host (backend.engines.tasks_view).
        self.cluster: ClusterSpec = tasks_view(state.cluster)
        self.job: JobSpec = _saved_job(state.job, store.path(state.run_id))
        self.engine: Engine = engine or engine_for(state.cluster, pool)
        self.keeper_note = ""   # what settle() found about the keeper, for status displays

    @property
    def run_id(self) -> str:
        return self.state.run_id

    @property
    def local_dir(self) -> Path:
        return self.store.path(self.run_id)

    @property
    def kept(self) -> bool:
        """Whether a keeper owns this run's outcome (restart policy on_failure)."""
        return self.job.restart.mode == RestartMode.ON_FAILURE

    @property
    def watched(self) -> bool:
        """Whether a keeper process follows the run: a kept run, or one with a webhook. Without
        restarts the keeper only settles the run as any reader does, so its end (and a NaN loss)
        is told at once, with no console or CLI open to read it."""
        return self.kept or bool(alert_settings.load(self.local_dir))

    def task(self, name: str) -> TaskState:
        for t in self.state.tasks:
            if t.name == name:
                return t
        raise RunError(f"run {self.run_id} has no task {name!r}",
                       f"Use one of: {', '.join(t.name for t in self.state.tasks)}.")

    def task_spec(self, name: str) -> TaskSpec:
        return self.cluster.tasks[self.task(name).position]

    def transport(self, name: str):
        return self.pool.transport(self.task_spec(name))

    def remote(self, name: str) -> remote.Host:
        """The host-side command line in this task's run directory (``backend.hosts.remote``)."""
        return task_host(self.pool, self.cluster, self.task(name))

    def reload(self) -> RunState:
        self.state = self.store.load(self.run_id)
        return self.state

    def update(self, change) -> RunState:
        """Change the saved state under the run's lock and take the result (not the phase:
        that moves through ``move``)."""
        self.state = self.store.update(self.run_id, change)
        return self.state

    def move(self, to: Phase, **how) -> bool:
        """Move the run's phase (``RunStore.move``: a compare-and-set under its lock) and take the
        result; whether it moved."""
        self.state, moved = self.store.move(self.run_id, to, **how)
        if moved:   # exactly one mover per change: it queues the alert (the sender is detached)
            _alert(self.local_dir, self.state, to)
            if to in (Phase.FINISHED, Phase.FAILED) and goodput_alerts.wants_goodput(self.local_dir):
                self._goodput_alert(to)
        return moved

    def _goodput_alert(self, to: Phase) -> None:
        """The job's ``alerts.goodput_below``: its goodput, read as the run ends (the chief's lines
        from its host, else this machine's copies); never fails the move."""
        from backend.records import goodput as account
        from backend.runs import goodput
        try:
            found = goodput.of(self)
            last = self.state.attempts[-1] if self.state.attempts else None
            goodput_alerts.on_low_goodput(self.local_dir, self.run_id, phase=str(to), share=found.share,
                                  said=account.summary(found), attempt=self.state.attempt,
                                  step=last.last_step if last else None)
        except (ConsoleError, OSError) as err:
            print(f"goodput alert for run {self.run_id} not queued: {err}", file=sys.stderr)

    # -- reading ------------------------------------------------------------------------
    def status(self) -> list[TaskStatus]:
        """Each task's state; the recorded phase and attempts follow the scheduler
        (``follow_requeue``, ``follow_queue``)."""
        statuses = self.engine.status(self)
        self.follow_requeue()
        self.follow_queue(statuses)
        last = self.state.attempts[-1] if self.state.attempts else None
        return mark_stopped(statuses, stopped_by(self.state.phase, last.reason if last else None))

    def follow_requeue(self) -> None:
        """The cluster requeued the job itself (Slurm: an administrator's ``scontrol requeue``, a
        preemption under ``PreemptMode=REQUEUE``, a node failure) and runs the same job again:
        record that as the next attempt. The attempt that ends says so and which step the
        requeue's signal saved; the next one resumes from the newest checkpoint every task holds,
        as the re-run itself does. A compare-and-set on the attempt number: of two readers, one
        records it; nothing is submitted."""
        if self.state.phase not in UNDERWAY:
            return
        found = self.engine.requeued(self)
        if found is None:
            return
        from backend.checkpoints import common_checkpoint   # imports this module
        try:
            step = found.resume_step if found.known else common_checkpoint(self)
        except ConsoleError:
            return   # the login host did not answer: the next reader records it
        saved = self._preempt_record()
        said = preempted_reason(saved).removeprefix(f"{PREEMPTED}: ") if saved else "no save on its signal"
        reason = (f"{REQUEUED} by Slurm: job {found.job_id} went back to the queue (restart "
                  f"{found.restart}); {said}; the same job resumes from "
                  f"{'scratch' if step is None else f'step {step}'}")
        last_step = int(saved["step"]) if saved else self.last_step()
        self.engine.follow(self, found)
        recorded = []

        def record_it(state: RunState) -> None:
            if state.attempt != found.attempt - 1 or state.phase not in UNDERWAY:
                return   # another reader recorded it, or the run moved on
            ended, now = state.attempts[-1], time.time()
            ended.ended, ended.reason, ended.last_step = now, reason, last_step
            state.attempts.append(Attempt(found.attempt, now, resume_step=step))
            recorded.append(True)
        self.update(record_it)
        if recorded:
            outbox.on_restart(self.local_dir, self.state)   # the webhook hears why, once

    def follow_queue(self, statuses: list[TaskStatus]) -> None:
        """Record ``queued`` while the scheduler holds every task, ``running`` once it has started
        them, so the record, ``status --json``, the runs list and ``state.phase`` all agree with
        what the scheduler says. A compare-and-set between the two only: a Stop or a settle that
        moved the run on keeps it. An unreachable task is no news: the phase stays."""
        if self.state.phase not in UNDERWAY:
            return
        if all_queued(statuses):
            want = Phase.QUEUED
        elif statuses and not any(s.state == TaskPhase.UNREACHABLE for s in statuses):
            want = Phase.RUNNING
        else:
            return
        if self.state.phase != want:
            self.move(want, when=tuple(p for p in UNDERWAY if p != want),
                      **({"on_move": _dequeued} if want == Phase.RUNNING else {}))

    def shown_phase(self, statuses: list[TaskStatus]) -> str:
        """The phase as people see it: ``queued (Resources, 1st of 2 waiting)`` while a scheduler
        holds every task, else the recorded phase (``outcome.shown_phase``)."""
        return shown_phase(self.state.phase, statuses)

    def log_tail(self, name: str, max_bytes: int = 20000) -> str:
        """The end of a task's log: from its host, or from the copy kept here (``logcopy``) when
        the run has ended or the host does not answer."""
        from backend.watch.logcopy import local_copy
        self.task(name)   # an unknown task is an error, not an empty log
        local = local_copy(self, name)
        if local is not None and not self.state.live:
            return _tail(local, max_bytes)
        try:
            text = self.engine.log_tail(self, name, max_bytes)
        except ConsoleError as err:
            return _tail(local, max_bytes) if local is not None else f"(log unavailable: {err})"
        return text or (_tail(local, max_bytes) if local is not None else "")

    def follow(self, name: str):
        """Yield the task's log lines as they are written (``logs --follow``)."""
        stream = remote.follow(self.remote(name), layout.log_file("", name))   # run-relative
        try:
            for line in stream.stdout:
                yield line.decode(errors="replace").rstrip("\n")
        finally:
            stream.close()

    def monitor(self, store, *, poll: bool = False):
        """A watch agent on the chief feeding ``store`` (a ``MetricsStore``); call ``.start()``."""
        from backend.watch.monitor import GpuHost, RunMonitor  # watchdog: only who monitors needs it
        chief = self.state.chief
        spec = self.task_spec(chief.name)
        # Every other host's GPUs too, each read by an agent there (one per host, not per task).
        others = {g.spec.host: g for g in by_host(self.state.tasks, self.cluster) if g.spec.host != spec.host}
        def agent(python: str, run_dir: str) -> tuple[str, ...]:   # with site-packages: watchdog
            return tuple(layout.host_argv(python, run_dir, "watch", site=True))
        gpu_hosts = tuple(GpuHost(name, (lambda s=g.spec: make_transport(s, self.pool.options)),
                                  agent(g.spec.python, g.run_dir), g.run_dir)
                          for name, g in others.items())
        fan_out = self.engine.gpu_fan_out(self)
        if fan_out is not None:   # Slurm: the nodes' GPUs, reached from the login host by srun
            gpu_hosts = (GpuHost("nodes", lambda: make_transport(spec, self.pool.options),
                                 agent(spec.python, chief.remote_run_dir), chief.remote_run_dir,
                                 fan_out=fan_out),)
        return RunMonitor(lambda: make_transport(spec, self.pool.options), chief.remote_run_dir,
                          str(self.local_dir), store, poll=poll,
                          agent=agent(spec.python, chief.remote_run_dir),
                          host=spec.host, gpu_hosts=gpu_hosts)

    # -- settling -----------------------------------------------------------------------
    def settle(self, statuses: list[TaskStatus] | None = None) -> list[TaskStatus]:
        """Read the tasks and, when their attempt has ended, record how. Returns the statuses.

        A run with a keeper is the keeper's to settle; if its keeper is gone, a new one starts.
        """
        self.reload()
        if self.state.launch_cut_off():
            self._settle_cut_off_launch()
        if statuses is None:
            statuses = self.status() if self.state.live else []
        if self.kept and self.state.phase in (*UNDERWAY, Phase.RESTARTING):
            self.keeper_note = detached.ensure_keeper(self.run_id, self.store.root, self.pool.options)
            return statuses
        if self.kept or self.state.phase not in UNDERWAY:
            return statuses
        found = conclude(statuses)
        if found.verdict in (Verdict.FAILED, Verdict.FINISHED) and not found.all_ended:
            self._stop_survivors(found)
        elif found.verdict in (Verdict.FINISHED, Verdict.FAILED, Verdict.PREEMPTED):
            self.conclude_attempt(found, expect=UNDERWAY)
        return statuses

    def _settle_cut_off_launch(self) -> None:
        """The process that was starting this run is gone (Ctrl-C, killed, a crash): stop what it
        may have started and record the run failed, so no session takes it for the live run. A
        kept run whose keeper died while starting a restart goes back to ``restarting`` instead:
        its keeper (``settle`` starts one) starts that attempt again (``outcome.restarts_used``)."""
        reason = self.state.launch_cut_off()
        report = self.stop_attempt(grace_s=SETTLE_STOP_GRACE_S)
        then = Phase(cut_off_phase(self.state.launcher, kept=self.kept))
        # Only if still so under the lock: nobody else has settled it meanwhile.
        self.move(then if report.clean else Phase.STOPPING,
                  when=lambda state: state.launch_cut_off() == reason, reason=reason,
                  unreachable=report.errors)

    def last_step(self) -> int | None:
        """The current attempt's last step in the chief's metrics, or None (none yet, no answer)."""
        try:
            found = remote.progress(self.remote(self.state.chief.name))
            line = metric_line.parse(json.loads(found.last_line or "{}"))
        except (ConsoleError, ValueError):
            return None   # no metrics (a command job), or not JSON: the step stays unknown
        return line.step if line is not None and line.attempt == self.state.attempt else None

    def conclude_attempt(self, found: Conclusion, *, expect: tuple[Phase, ...] = UNDERWAY,
                         last_step: int | None = None) -> bool:
        """Record a finished or failed attempt, only if the run is still in one of ``expect``.
        A preempted one (no keeper to resume it) ends ``stopped`` at its saved step: Restore
        offers that step first."""
        expect = (expect,) if isinstance(expect, Phase) else tuple(expect)   # a Phase is a str
        if found.verdict == Verdict.PREEMPTED:
            record = self._preempt_record()
            reason, saved = self.preemption(record)
            reason += how_to_go_on(saved, time_limit=self._time_limit(record))   # nothing resumes it
            self.mirror_logs()
            return self.move(Phase.STOPPED, when=expect, reason=reason, last_step=saved)
        phase = Phase.FINISHED if found.verdict == Verdict.FINISHED else Phase.FAILED
        if last_step is None:
            last_step = self.last_step()
        self.mirror_logs()
        return self.move(phase, when=expect, reason=found.reason, last_step=last_step)

    def preemption(self, record: dict | None = None) -> tuple[str, int | None]:
        """The attempt's reason and saved step after a preemption, from the chief's record (read
        here unless given); a save on the scheduler's time-limit warning says so."""
        record = record or self._preempt_record()
        return (preempted_reason(record, time_limit=self._time_limit(record)),
                int(record["step"]) if record else self.last_step())

    def _time_limit(self, record: dict | None) -> str | None:
        """The job's time limit when ``record`` is a save on the warning ahead of it (Slurm)."""
        return self.engine.time_limit(record)

    def _preempt_record(self) -> dict | None:
        """The chief's record of the step every worker saved on a signal in this attempt."""
        chief = self.state.chief.name
        try:
            data = remote.read_file(self.remote(chief), layout.task_file("", chief, preempt.SUFFIX))
            record = json.loads(data) if data else None
        except (ConsoleError, ValueError):
            record = None
        if record and record.get("attempt") not in (None, self.state.attempt):
            record = None   # an older attempt's record
        return record

    def _stop_survivors(self, found: Conclusion) -> None:
        """A task failed while others still run (they can only abort or hang), or the chief
        finished while they only shut down (``outcome.after_the_chief``): stop them."""
        report = self.engine.stop(self, grace_s=SETTLE_STOP_GRACE_S)
        if report.clean:
            self.conclude_attempt(found, expect=UNDERWAY)

    # -- acting -------------------------------------------------------------------------
    @audit.recorded("dump_stacks")
    def dump_stacks(self):
        """Every worker's Python stack, kept under the run's folder (``diagnosis.stacks``), checked
        and recorded as any action on the run; (stacks by task, folder)."""
        from backend.diagnosis import stacks
        return stacks.dump_and_save(self)

    @audit.recorded("stop", "save")
    def stop(self, *, grace_s: float = STOP_GRACE_S, reason: str = "stopped", save: bool = False,
             save_grace_s: float = SAVE_GRACE_S) -> StopReport:
        """Stop every task and check that nothing is left; raise naming the hosts that remain.

        The run is ``stopping`` first (a keeper that sees it yields), then ``stopped``; if a host
        could not be reached or still holds a process, it stays ``stopping`` and Stop stays offered.
        ``save``: first every worker saves one step and exits (as on a preemption signal); the
        attempt's reason and last step say which step (``saved_step``), Restore lists it first.
        """
        if not self.reload().live:
            # Already ended: a second delivery of one Stop click, or a stop that came after
            # another. What the first stop recorded (reason, saved step) stays, and nothing waits
            # for a save that no worker will make (this used to reset ``saved_step`` and wait
            # ``save_grace_s``, and the console then said "no save" after both workers saved).
            last = self.state.attempts[-1] if self.state.attempts else None
            saved = last is not None and (last.reason or "").endswith(SAVED_ON_EVERY_WORKER)
            self.saved_step = last.last_step if saved else None
            return StopReport()
        queued = self.state.phase == Phase.QUEUED   # nothing started, so nothing to save
        self.move(Phase.STOPPING, when=lambda state: state.live)
        self.saved_step = None
        if save and not queued:
            # The save's outcome follows the stop's own reason ("pruned by the sweep at step 18
            # (val_loss 0.52): saved at step 19 on every worker"); a plain stop's is "stopped: ...".
            self.saved_step, said = self._save_then_exit(save_grace_s)
            reason = f"{reason}: {said}"
        report = self.engine.stop(self, grace_s=grace_s)
        last_step = self.saved_step if self.saved_step is not None else self.last_step()

        def left_behind(state: RunState) -> None:   # written whether or not the run ends stopped
            state.unreachable = sorted(report.errors)
        self.move(Phase.STOPPED, when=lambda state: report.clean and state.phase == Phase.STOPPING,
                  reason=reason, last_step=last_step, before=left_behind)
        if report.clean:
            # A keeper asleep in a back-off, or one that cannot read the run, would outlive it.
            detached.end_keeper(self.local_dir)
        # Log copies and versions follow off the stop's path (they were most of a
        # 32-task stop); until they land, log_tail reads the hosts.
        aftercare.start(self.run_id, self.store.root, self.pool.options)
        if not report.clean:
            raise MultiHostError("stop", report.errors,
                                 "The run stays 'stopping': when those hosts answer again, run stop again.")
        return report

    def _save_then_exit(self, within_s: float) -> tuple[int | None, str]:
        """A save-stop request to the chief: every worker saves one step, then exits. The step,
        once the chief has answered and no task runs any more, with what became of the save; None when
        there is no save: not within ``within_s``, or every task had already exited (a run that
        finishes as it is stopped, a sweep's trial pruned at its end): no save can come then,
        so the stop does not wait out ``within_s`` for one."""
        host = self.remote(self.state.chief.name)
        no_save = f"no save within {within_s:g} s (the previous checkpoint stays usable)"
        try:
            name = remote.request_save(host, stop=True)
        except ConsoleError:
            return None, no_save   # the chief does not answer: the plain stop below still runs
        deadline, step, asked = time.time() + within_s, None, 0.0
        while time.time() < deadline:
            try:
                step = step if step is not None else remote.save_done(host, name)
                # Tasks are asked at most every EXITED_POLL_S while the save is awaited: each
                # question is a call to every host.
                if step is not None or time.time() - asked >= EXITED_POLL_S:
                    asked = time.time()
                    if all(s.state in (TaskPhase.EXITED, TaskPhase.LOST) for s in self.status()):
                        # The chief writes its answer before it exits: asked once more, it is final.
                        step = step if step is not None else remote.save_done(host, name)
                        if step is not None:
                            return step, f"saved at step {step}{SAVED_ON_EVERY_WORKER}"
                        return None, ("every task had exited before it could save "
                                      "(the previous checkpoint stays usable)")
            except ConsoleError:
                pass   # a host that hiccups: ask again until the deadline
            time.sleep(0.2)
        return step, (f"saved at step {step}{SAVED_ON_EVERY_WORKER}" if step is not None else no_save)

    def stop_attempt(self, *, grace_s: float) -> StopReport:
        """Stop the tasks without changing the run's phase (the keeper, between attempts)."""
        report = self.engine.stop(self, grace_s=grace_s)
        self.mirror_logs()
        return report

    def mirror_logs(self) -> list[str]:
        """Copy each task's log into the local run directory, every task at once, bounded
        (``logcopy.keep_snapshots``), and the chief's metric lines (``chief_metrics.keep``), and
        keep the hosts' versions; best effort: hosts may be
        gone. Returns the tasks whose log could not be read."""
        from backend.watch import chief_metrics, logcopy
        missed = logcopy.keep_snapshots(self, lambda task, size: self.engine.log_tail(self, task, size))
        chief_metrics.keep(self)   # the Runs page shows an ended run's metrics without Monitor
        record.keep_host_versions(self)   # what each host ran with, kept while its hosts answer
        return missed

    def wait(self, timeout: float, poll_s: float = 1.0) -> list[TaskStatus]:
        """Block until the run has ended (whoever settles it); the tasks' last statuses."""
        deadline = time.time() + timeout
        while True:
            statuses = self.settle()
            if not self.state.live:
                return statuses or self.status()
            if time.time() > deadline:
                raise RunError(f"run {self.run_id} still {self.state.phase} after {timeout:.0f} s",
                               f"Check `python -m backend status {self.run_id}`, or stop it.")
            time.sleep(poll_s)

    def request_save(self) -> str:
        """Ask the chief to save at its next sync point: a request file in its run directory."""
        return remote.request_save(self.remote(self.state.chief.name))


def _alert(local_dir: Path, state: RunState, to: Phase) -> None:
    """Queue the webhook alert for a move to ``to`` (backend.alerts.outbox); never fails the move."""
    last = state.attempts[-1] if state.attempts else None
    try:
        outbox.on_move(local_dir, state.run_id, str(to), reason=last.reason if last else None,
                       step=last.last_step if last else None, attempt=state.attempt)
    except OSError as err:   # a full disk, say: the run's record matters more than its alert
        print(f"alert for run {state.run_id} not queued: {err}", file=sys.stderr)


def _dequeued(state) -> None:
    """The attempt the scheduler held has started: when, for goodput's queue time."""
    if state.attempts and state.attempts[-1].dequeued is None:
        state.attempts[-1].dequeued = time.time()


def _saved_job(job: dict, local_dir: Path) -> JobSpec:
    """The job as its record saved it (checked at launch). Its module is the copy that launch
    keeps in the run's folder: found there from any working folder, even in a record that an
    older version wrote with a relative path (`--runs myruns`). Its file is needed only to start
    an attempt, so a reader (status, stop) never fails on it."""
    data = dict(job)
    module = data.get("module")
    if module and (local_dir / layout.JOB / Path(module).name).is_file():
        data["module"] = str(local_dir / layout.JOB / Path(module).name)
    return JobSpec(**data)


def _tail(path: Path, max_bytes: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(max(0, fh.seek(0, 2) - max_bytes))
        return fh.read().decode(errors="replace")
