"""The sweep's keeper: asks Optuna for trials, launches each as an ordinary run on a free group
of hosts, reports the run's objective values to Optuna as they come, prunes (save, then stop)
where Optuna says so, and tells Optuna each trial's end. One keeper per sweep (a lock); a
keeper started again finds the trials still running in the storage and keeps them (their run
ids are trial attributes), so none is lost or run twice.

A launch takes seconds (preflight, shipping the project, starting the tasks), so each runs on a
thread of its own (one per group of hosts) while the keeper goes on following the running
trials: a prune never waits for a launch to finish. Optuna itself is asked and told only from the keeper's own thread."""
from __future__ import annotations

import fcntl
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from optuna.trial import TrialState

from backend.client.harness.contract import layout
from backend.errors import ConsoleError
from backend.files import read_dict
from backend.hosts import remote
from backend.hosts.ssh import SSHOptions
from backend.records import outcome
from backend.runs import detached, launcher
from backend.runs.store import RunStore
from backend.sweeps import control, study as studies
from backend.sweeps.spec import host_groups, with_params
from backend.watch import chief_metrics

PRUNE_SAVE_S = 30.0
NEVER = studies.NEVER   # a trial's user attr: cut off before its run existed, not in the budget
PRUNED = studies.PRUNED  # a trial's user attr: the prune decided (step, what pruned it), before its stop


@dataclass
class Active:
    trial: object          # optuna.trial.Trial
    run: object            # backend.runs.handle.Run
    group: int
    reported: set = field(default_factory=set)
    lines: chief_metrics.Growing | None = None   # the chief's metric lines, read as they grow

    def __post_init__(self) -> None:
        self.lines = chief_metrics.Growing(self.run)


class SweepKeeper:
    def __init__(self, sweep_id: str, store: RunStore, options: SSHOptions, *, poll_s: float = 1.0) -> None:
        self.sweep_id, self.store, self.options, self.poll_s = sweep_id, store, options, poll_s
        self.here = control.folder(store.root, sweep_id)
        self.spec = control.load_spec(self.here)
        self.groups = host_groups(self.spec.cluster, self.spec.at_once)
        try:
            self.study = studies.open_study(self.spec, self.here, sweep_id)
        except ConsoleError as err:   # its storage went away or was damaged since the start
            control.set_state(self.here, phase="failed", reason=str(err))
            raise
        self.active: dict[int, Active] = {}
        self.launching: dict[int, tuple[object, str, Future]] = {}   # slot -> (trial, run id, its launch)
        self.launcher: ThreadPoolExecutor | None = None

    def run(self) -> str:
        lock = open(self.here / "keeper.lock", "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "another keeper keeps this sweep"
        started = read_dict(self.here / control.STATE).get("started") or time.time()
        control.set_state(self.here, phase="running", started=started)
        self.launcher = ThreadPoolExecutor(max_workers=len(self.groups), thread_name_prefix="sweep-launch")
        try:
            self._adopt()
            return self._loop(started)
        except ConsoleError as err:
            self.stop_all(str(err), phase="failed")
            return f"failed: {err}"
        except Exception as err:   # a bug: the sweep says so and stops its trials, never hangs "running"
            self.stop_all(f"the sweep's keeper failed ({type(err).__name__}: {err}); its log has the details",
                          phase="failed")
            raise
        finally:
            self.launcher.shutdown(wait=True)

    def _loop(self, started: float) -> str:
        while True:
            if (self.here / control.STOP).exists():
                self.stop_all("stopped by the user")
                return "stopped"
            for slot in [s for s, (_, _, launch) in self.launching.items() if launch.done()]:
                self._launched(slot)
            for slot in list(self.active):
                self._follow(slot)
            while self._budget_left(started) and len(busy := set(self.active) | set(self.launching)) < len(self.groups):
                self._launch(min(set(range(len(self.groups))) - busy))
            if not self.active and not self.launching and not self._budget_left(started):
                control.set_state(self.here, phase="finished", reason="budget spent")
                return "finished"
            time.sleep(self.poll_s)

    def _budget_left(self, started: float) -> bool:
        asked = len([t for t in self.study.get_trials(deepcopy=False) if not t.user_attrs.get(NEVER)])
        cap = self.spec.trials
        if self.spec.sampler == "grid":
            cap = min(cap or studies.grid_size(self.spec.space), studies.grid_size(self.spec.space))
        if cap is not None and asked >= cap:
            return False
        return self.spec.wall_s is None or time.time() - started < self.spec.wall_s

    def _adopt(self) -> None:
        """A restarted keeper: trials still running in the storage keep their runs (and groups)."""
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            run_id, group = frozen.user_attrs.get("run_id"), frozen.user_attrs.get("group")
            try:
                run = None if run_id is None or group in self.active else \
                    launcher.attach(run_id, store=self.store, options=self.options)
            except ConsoleError:
                run = None
            if run is None:   # launched nothing: not counted in the budget, asked again
                _trial(self.study, frozen.number).set_user_attr(NEVER, True)
                studies.tell(self.study, frozen.number, state=TrialState.FAIL)
                continue
            trial = _trial(self.study, frozen.number)
            self.active[group] = Active(trial, run, group, set(frozen.intermediate_values))
            if prune := frozen.user_attrs.get(PRUNED):   # an earlier keeper's prune, cut off
                # A save only while a task still trains: one that exited after the first
                # keeper's save request has nothing more to save.
                running = any(s.state == outcome.TaskPhase.RUNNING for s in run.status()) if run.reload().live else False
                self._prune(group, self.active[group], prune, save=running and self._saves(run))

    def _launch(self, slot: int) -> None:
        """Ask Optuna for the slot's next trial and start its launch on the launch thread."""
        trial = studies.ask(self.study, self.spec.space)   # never a launched trial's params again
        run_id = f"{self.sweep_id}-t{trial.number}"
        # Named before the launch: a keeper killed during it finds the run on restart (or, when
        # the run never got a record, knows the trial launched nothing).
        trial.set_user_attr("group", slot)
        trial.set_user_attr("run_id", run_id)
        job = with_params(self.spec.job, trial.params)
        tag = {"sweep": self.sweep_id, "trial": trial.number, "params": trial.params}
        preflight = launcher.Preflight.REQUIRED if trial.number == 0 else launcher.Preflight.SKIP
        self.launching[slot] = (trial, run_id, self.launcher.submit(
            launcher.launch, self.groups[slot], job, store=self.store, options=self.options, run_id=run_id,
            sweep=tag, preflight=preflight))

    def _launched(self, slot: int) -> None:
        """A launch has ended: its trial is followed from now on, or failed with the refusal."""
        trial, run_id, launch = self.launching.pop(slot)
        try:
            run = launch.result()
        except ConsoleError as err:
            trial.set_user_attr("note", f"launch refused: {err}")
            studies.tell(self.study, trial, state=TrialState.FAIL)
            if trial.number == 0:   # the job itself cannot start: no use asking again
                raise studies.SweepError(f"trial 0 could not launch ({err.problem})", err.fix) from None
            return
        self.active[slot] = Active(trial, run, slot)
        print(f"trial {trial.number}: run {run_id} on group {slot}, {trial.params}", flush=True)

    def _follow(self, slot: int) -> None:
        act = self.active[slot]
        act.run.settle()   # a run without a keeper of its own is settled by its readers: here
        state = act.run.state
        steps, values = self._objective(act)
        for step, value in zip(steps, values):
            if step not in act.reported:
                act.trial.report(float(value), int(step))
                act.reported.add(step)
        if state.live and act.reported and act.trial.should_prune():
            step = int(max(act.reported))
            # The value that pruned it, as the chief reported it (Optuna holds it as well).
            said = f"at step {step} ({self.spec.metric} {dict(zip(steps, values))[step]:.6g})"
            self._prune(slot, act, {"step": step, "said": said}, save=self._saves(act.run))
        elif not state.live:
            self._ended(slot, act, str(state.phase), values)

    def _prune(self, slot: int, act: Active, prune: dict, *, save: bool) -> None:
        """Save-stop the trial's run and tell Optuna it was pruned. The decision is stored first:
        a keeper killed during the stop (its save waits up to PRUNE_SAVE_S) leaves it for the next
        keeper, which finishes this prune with its step and reason instead of pruning again."""
        act.trial.set_user_attr(PRUNED, prune)
        if act.run.reload().live:
            act.run.stop(save=save, save_grace_s=PRUNE_SAVE_S, reason=f"pruned by the sweep {prune['said']}")
        act.trial.set_user_attr("note", f"pruned {prune['said']}")
        studies.tell(self.study, act.trial, state=TrialState.PRUNED)
        del self.active[slot]

    def _ended(self, slot: int, act: Active, phase: str, values) -> None:
        del self.active[slot]
        last = act.run.state.attempts[-1].reason or "" if act.run.state.attempts else ""
        if last.startswith(outcome.INTERRUPTED):   # a keeper killed while launching it: it never ran
            act.trial.set_user_attr(NEVER, True)
        if phase == "finished" and len(values):
            studies.tell(self.study, act.trial, studies.trial_value(values, self.spec.direction, self.spec.of))
            return
        act.trial.set_user_attr("note", f"run {phase}" + ("" if len(values) else f", no {self.spec.metric} reported"))
        studies.tell(self.study, act.trial, state=TrialState.FAIL)
        if phase == "finished" and not self._ever_reported():
            names = ", ".join(act.lines.read().metric_names()) or "none"
            raise studies.SweepError(
                f"the objective metric {self.spec.metric!r} was never reported by trial {act.trial.number} "
                f"(run {act.run.run_id} reports: {names})",
                "Name a metric the job reports in objective.metric, then start the sweep again.")

    @staticmethod
    def _saves(run) -> bool:
        """Whether the trial's job answers a save (a harness job, a fit script's KerasCallback or a
        tfconsole.Loop: each writes train.json at its start); a plain script that only reports is
        stopped without waiting PRUNE_SAVE_S for a save it cannot make."""
        try:
            return remote.read_file(run.remote(run.state.chief.name), layout.TRAIN_INFO) is not None
        except ConsoleError:
            return True   # cannot tell: ask for the save, as for any pruned trial

    def _ever_reported(self) -> bool:
        return any(t.intermediate_values for t in self.study.get_trials(deepcopy=False))

    def _objective(self, act: Active):
        found = act.lines.read()
        if self.spec.metric not in found.metric_names():
            return [], []
        return found.metric(self.spec.metric)

    def stop_all(self, reason: str, *, phase: str = "stopped") -> None:
        """Stop every running trial's run (nothing left on a host), mark those trials failed. A
        launch under way is waited for first: its run is then one of those stopped."""
        for _, _, launch in self.launching.values():
            try:
                launch.result()
            except Exception:  # noqa: BLE001 - a launch that failed left no run to stop
                pass
        self.launching.clear()
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            run_id = frozen.user_attrs.get("run_id")
            if run_id:
                run = launcher.attach(run_id, store=self.store, options=self.options)
                try:
                    if run.reload().live:
                        run.stop(reason=f"stopped: sweep {phase} ({reason})")
                except ConsoleError as err:   # named in the sweep's reason; Stop stays offered
                    reason += f"; trial {frozen.number}: {err}"
            studies.tell(self.study, frozen.number, state=TrialState.FAIL)
        self.active.clear()
        control.set_state(self.here, phase=phase, reason=reason)


def _trial(study, number: int):
    from optuna.trial import Trial
    return Trial(study, study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number))


def main(sweep_id: str, runs_root: Path, options: SSHOptions, poll_s: float) -> str:
    return SweepKeeper(sweep_id, RunStore(runs_root), options, poll_s=poll_s).run()


def stop(runs_root: Path, sweep_id: str, *, wait_s: float = 120.0) -> dict:
    """Ask the keeper to stop every running trial and end; wait for it. With no keeper alive,
    this process does the keeper's stop itself. The sweep's status after."""
    here = control.folder(runs_root, sweep_id)
    control.status(runs_root, sweep_id)   # refuses an unknown sweep by name
    (here / control.STOP).touch()
    deadline = time.monotonic() + wait_s
    while detached.keeper_pid(here) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    if detached.keeper_pid(here) is not None:
        raise ConsoleError(f"sweep {sweep_id}: its keeper did not stop within {wait_s:g} s",
                           "Run `tfconsole sweep stop` again; its log is in " + str(here / detached.KEEPER_LOG))
    if read_dict(here / control.STATE).get("phase") in control.LIVE:
        options = SSHOptions(**read_dict(here / control.STATE).get("ssh_options", {}))
        SweepKeeper(sweep_id, RunStore(runs_root), options).stop_all("stopped by the user")
    return control.status(runs_root, sweep_id)
