"""Run actions behind the buttons: start, save now, export, restore. Plain functions: each
returns a result or raises ConsoleError, whose text the page shows as it is."""
from __future__ import annotations

import threading
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable

from backend import checkpoints, profiles
from backend.errors import ArtifactError, ConsoleError, SpecError
from backend.client.harness.contract import layout
from backend.runs import restore as run_restore
from backend.records import project
from backend.runs.launcher import Preflight, launch
from backend.records.state import new_run_id
from backend.config.slurm_spec import is_slurm_spec
from backend.config.spec import JobSpec
from console import cluster_actions, forms
from console.live_run import LiveRun, Registry, require_live


@dataclass
class StartResult:
    live: LiveRun | None = None
    errors: list[str] = field(default_factory=list)
    preflight: dict | None = None


def project_preview(folder: str, *, base_dir: Path) -> str:
    """What a project folder typed on the Launch form will send (names and sizes, nothing read),
    or what is wrong with it: one line either way."""
    path = Path(folder.strip()).expanduser()
    try:
        return "Will send " + project.summary(project.scan(base_dir / path))
    except ConsoleError as err:
        return str(err)
    except OSError as err:
        return f"project: cannot read {path}: {err.strerror or err}. Check the folder's permissions."


def begin_start(rows: list[dict], job: JobSpec, registry: Registry) -> str:
    """Check the cluster now (its errors show at once), then preflight and launch in the
    background under a run id chosen here; the id goes into the session before any slow work,
    so whatever page the user opens next finds the run. ``rows`` may be a ``SlurmSpec``."""
    cluster, problems = (rows, []) if is_slurm_spec(rows) else forms.check_rows(rows)
    if cluster is None or forms.blocking(problems):
        raise ConsoleError("The cluster has errors: " + " ".join(p.text() for p in problems if p.level == "error"),
                           "Fix them on the Cluster page, then press Start again.")
    run_id = new_run_id()

    def work(action) -> StartResult:
        action.say("preflight: checking every host")
        result = start(rows, job, registry, run_id=run_id, say=action.say)
        if result.errors:
            action.result = result
            raise ConsoleError(" ".join(result.errors))
        action.say("every task started; the watch agent is connecting")
        action.summary = f"Run {run_id} started. Open the Monitor page to watch its loss."
        return result
    registry.actions.submit("start", run_id, work)
    return run_id


def start(rows: list[dict], job: JobSpec, registry: Registry, *, run_id: str | None = None,
          say: Callable[[str], None] = lambda _: None) -> StartResult:
    """Check the cluster, run the preflight, launch on every host and start watching.
    ``say`` hears each stage of the start as the hosts record it (``_follow_start``).

    On Slurm, ``sbatch`` makes the checks and refuses with Slurm's message: no preflight."""
    if is_slurm_spec(rows):
        return _launch(rows, job, registry, run_id, report=None, say=say)
    cluster, problems = forms.check_rows(rows)
    if cluster is None or forms.blocking(problems):
        return StartResult(errors=["The cluster has errors; fix them on the Cluster page. "
                                   + p.text() for p in problems if p.level == "error"])
    try:   # before preflight, as launch does: a runs folder that cannot hold the run refuses it now
        registry.store.require_writable()
    except ConsoleError as err:
        return StartResult(errors=[str(err)])
    try:
        # The project's requirements, on every host (installed there instead when the job asks).
        wanted = () if job.pip_install else project.requirements(job.project)
    except ConsoleError as err:
        return StartResult(errors=[str(err)])
    report = cluster_actions.preflight(cluster, registry.options, requirements=wanted)
    if report["error"] or report["failures"]:
        return StartResult(errors=[report["error"] or "Preflight failed, nothing was started. "
                                   "Fix each host in the table, then start again."], preflight=report)
    return _launch(cluster, job, registry, run_id, report=report, say=say)


def _launch(cluster, job: JobSpec, registry: Registry, run_id: str | None, *, report: dict | None,
            say: Callable[[str], None]) -> StartResult:
    run_id = run_id or new_run_id()
    launched = threading.Event()
    say("starting the tasks on every host")
    threading.Thread(target=_follow_start, args=(registry, run_id, launched, say),
                     name=f"follow-start-{run_id}", daemon=True).start()
    try:
        run = launch(cluster, job, store=registry.store, options=registry.options,
                     preflight=Preflight.SKIP, run_id=run_id)
    except ConsoleError as err:
        return StartResult(errors=[str(err)], preflight=report)
    finally:
        launched.set()
    live = registry.put(run)
    live.ensure_monitor()
    return StartResult(live=live, preflight=report)


# While a launch runs (it returns once every task is past its imports, plus launch's start check):
# how often its record and task states are read. Until the watch agent runs: often, since the
# first metrics come soon after the harness is on the chief; then as the pages would.
FOLLOW_FIRST_S = 0.2
FOLLOW_EVERY_S = 1.0


def _follow_start(registry: Registry, run_id: str, launched: threading.Event, say: Callable[[str], None]) -> None:
    """Beside the launch: hold the run once its record is written, so every page shows it;
    start its watch agent as soon as a status answer says the harness is on the chief (the
    first metrics then reach the store the moment they are written, not after launch's start
    check); say each stage the hosts record. Ends with the launch; never raises."""
    live, said = None, ""
    try:
        while not launched.wait(FOLLOW_FIRST_S if live is None or live.monitor is None else FOLLOW_EVERY_S):
            if live is None:
                if not (registry.store.path(run_id) / layout.STATE).exists():
                    continue
                live = registry.get(run_id)
            live.refresh(force=True)
            if live.statuses and live.monitor is None:
                live.ensure_monitor()
            stage = live.stage()
            if stage and stage != said:
                said = stage
                say(stage)
    except Exception:  # noqa: BLE001 - the launch itself reports failures; this only follows it
        pass


def save_now(live: LiveRun, wait_s: float = 120) -> int | None:
    require_live(live.run, "save a checkpoint")
    return checkpoints.save_now(live.run, wait_s=wait_s)


def begin_save(live: LiveRun, registry: Registry, wait_s: float = 120):
    """Save now in the background; the page shows its progress and result."""
    require_live(live.run, "save a checkpoint")

    def work(action) -> int | None:
        action.say(f"asking every worker to save at the next sync point (waiting up to {wait_s:.0f} s)")
        step = save_now(live, wait_s)
        action.summary = f"Checkpoint saved at step {step}."
        return step
    return registry.actions.submit("save", live.run_id, work)


def list_checkpoints(live: LiveRun) -> list[dict]:
    """The chief's complete checkpoints, asked of the chief (old ones get deleted as it trains);
    the monitor's record only when the chief cannot be reached."""
    try:
        return checkpoints.list_checkpoints(live.run)
    except ConsoleError:
        if live.monitor is not None and live.monitor.checkpoints():
            return [{"step": step, **meta} for step, meta in live.monitor.checkpoints().items()]
        raise


PAGE_COLUMNS = ("step", "epoch", "loss", "time", "size (KB)", "held by", "moved by")


def checkpoint_rows(found: list[dict]) -> list[dict]:
    """The page's columns of ``backend.checkpoints.checkpoint_rows`` (the one row builder)."""
    return checkpoints.checkpoint_rows(found, columns=PAGE_COLUMNS, clock="%H:%M:%S")


def step_options(steps: list[int], chosen) -> list[int]:
    """A picker's steps, newest first, always with the step the user chose: the selection is
    keyed by step and survives the list's refreshes even after that step left the list."""
    return sorted(set(steps) | ({chosen} if isinstance(chosen, int) else set()), reverse=True)


def list_abandoned(live: LiveRun) -> list[dict]:
    """Checkpoints that restores moved aside on the chief (kept, never picked by 'latest')."""
    return checkpoints.list_abandoned(live.run)


def _require_formats(formats: tuple[str, ...]) -> None:
    if not formats:
        raise ArtifactError("no format chosen", "Tick SavedModel, .keras or both.")


def export(live: LiveRun, step: int | None, formats: tuple[str, ...], name: str | None, *,
           on_step: Callable[[int], None] | None = None) -> dict:
    """Export ``step`` (None: the newest, resolved and held first; ``on_step`` hears which)."""
    _require_formats(formats)
    with live.lock:
        return checkpoints.export(live.run, step=step, name=name or None, formats=formats,
                                  on_step=on_step)


def begin_export(live: LiveRun, registry: Registry, step: int | None, formats: tuple[str, ...],
                 name: str | None):
    """Export in the background: hold the step, export on the chief, verify in a fresh process.
    What the form holds is checked first, so a bad name is said at the click, not by the thread."""
    _require_formats(formats)
    checkpoints.require_export_name(name or None)

    def work(action) -> dict:
        action.say("holding the checkpoint on the chief" if step is None else f"holding step {step} on the chief")
        result = export(live, step, formats, name, on_step=lambda s: action.say(
            f"exporting step {s} on the chief, then verifying it in a fresh process"))
        action.summary = export_summary(result)
        return {"run_id": live.run_id, **result}
    return registry.actions.submit("export", live.run_id, work)


def export_summary(result: dict) -> str:
    said = f"Export {result.get('name')} (step {result.get('step')})"
    if not result.get("match"):
        return said + " written."
    return (f"{said} verified: reloaded models match the checkpoint, max abs diff "
            f"{result['max_abs_diff']:.2e} (tolerance {result['tolerance']:g}).")


def fetch_keras(live: LiveRun, result: dict) -> bytes:
    """The exported model.keras as bytes, copied into the local run folder first."""
    name = result.get("name")
    if not name:
        raise ArtifactError("the export result names no export", "Export again.")
    folder = checkpoints.download_dir(live.run, name)   # the chief's name checked before mkdir
    path = checkpoints.fetch_export_file(live.run, name, "model.keras", str(folder / "model.keras"))
    with open(path, "rb") as f:
        return f.read()


def hold_for_restore(live: LiveRun, step: int | None) -> checkpoints.Hold:
    """Pin the step the user picked, before asking to confirm: it cannot vanish meanwhile."""
    if step is None:
        raise SpecError("step", "no checkpoint chosen", "Pick a checkpoint step.")
    return checkpoints.pin(live.run, int(step), purpose="restore", ttl_s=checkpoints.CHOICE_TTL_S)


def release_hold(live: LiveRun, hold: checkpoints.Hold) -> None:
    """Let retention have the step back. A hold that cannot be released now expires by itself
    (CHOICE_TTL_S), and what the user did matters more than that failure, so it is not raised."""
    try:
        checkpoints.release(live.run, hold)
    except ConsoleError:
        pass


def restore(live: LiveRun, hold: checkpoints.Hold) -> run_restore.RestoreResult:
    """Relaunch from the held step; the hold ends with the action, success or failure."""
    try:
        with live.lock:
            result = run_restore.restore(live.run, hold.step, hold=hold)
    finally:
        release_hold(live, hold)
    live.ensure_monitor()
    live.refresh(force=True)
    return result


def begin_restore(live: LiveRun, registry: Registry, hold: checkpoints.Hold):
    """Restore in the background from the step the user confirmed (held since the pick)."""
    def work(action) -> run_restore.RestoreResult:
        action.say(f"stopping the run, then relaunching every worker from step {hold.step}")
        outcome = restore(live, hold)
        aside = "; ".join(f"{t}: steps {s}" for t, s in sorted(outcome.moved_aside.items()))
        action.summary = (f"Run {live.run_id} restored from step {outcome.step}: {outcome.summary}."
                          + (f" Moved aside (kept, never picked by 'latest' or a restart): {aside}." if aside else ""))
        return outcome
    try:
        return registry.actions.submit("restore", live.run_id, work)
    except ConsoleError:
        release_hold(live, hold)   # nothing will use it
        raise


PROFILE_STEPS = 5


def profile(live: LiveRun, steps: int = PROFILE_STEPS, wait_s: float = 120.0):
    """Every worker profiled for ``steps`` steps from its next sync point (``backend.profiles``);
    checked against the roles file and recorded in the audit, as Save now is."""
    require_live(live.run, "profile it")
    return profiles.profile(live.run, steps, wait_s=wait_s, say=lambda s: None)


def latest_profile(live: LiveRun) -> tuple[str, dict] | None:
    """The run's newest profile on this machine: (its folder's name, {task: summary})."""
    return profiles.latest(live.run.local_dir)


def dump_stacks(live: LiveRun):
    """Every worker's Python stack, kept under the run's folder: (stacks by task, folder).
    Checked against the roles file and recorded in the audit (``Run.dump_stacks``)."""
    return live.run.dump_stacks()
