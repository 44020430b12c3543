"""Checkpoint actions, on the chief only: list, hold, save now, export. Restore begins an attempt,
so it is a step of a run's life (``backend.runs.restore``); this module sits below run life (the
keeper reads ``common_checkpoint``) and never imports ``backend.runs``.

The harness does the work on the hosts (``hostctl``'s checkpoint and export subcommands, the
training loop); this module asks for it through ``backend.hosts.remote`` and turns the answers
into typed results.

Every action holds the checkpoint it uses (``pin``: a hold file that the training's retention
respects) from the moment it picks it until it ends, success or failure; "latest" is resolved once,
by the pin, and the step it names is the one used. docs/checkpoints.md says how retention works.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

from backend.diagnosis import diagnose
from backend.errors import ArtifactError, HostError, RunError
from backend.client.harness.contract import layout, metric_line
from backend.hosts import remote
from backend.access import audit

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")   # \Z: no trailing newline
EXPORT_TIMEOUT_S = 900
CHOICE_TTL_S = 600       # a hold for a step a user chose and has not confirmed yet


class Run(Protocol):
    """What checkpoint actions read of a run; ``backend.runs.handle.Run`` is one."""
    state: Any
    job: Any

    @property
    def run_id(self) -> str: ...

    @property
    def local_dir(self) -> Path: ...

    def task(self, name: str) -> Any: ...

    def task_spec(self, name: str) -> Any: ...

    def remote(self, name: str) -> remote.Host: ...

    def reload(self) -> Any: ...

    def settle(self) -> list: ...


@dataclass(frozen=True)
class Hold:
    """A hold on one checkpoint step of one task's folder (the chief's, for every action)."""
    task: str
    step: int
    hold_id: str
    purpose: str


def host_name(name: object, host: str, what: str) -> str:
    """A checkpoint file or export name that a host reported, checked before it names anything
    on this machine: a plain file name (NAME), never a path that would leave its local folder."""
    if isinstance(name, str) and NAME.match(name):
        return name
    shown = repr(name[:80] + "..." if isinstance(name, str) and len(name) > 80 else name)[:100]
    raise HostError(host, f"the {what} name {shown} is not a plain file name",
                    "The run folder on that host holds files the harness did not write: check it "
                    "(nothing was copied to this machine).")


def _checked_listing(run: Run, task: str, listing: object) -> list[dict]:
    """A hostctl listing whose file names are all plain names (restore copies them by name)."""
    host = run.task_spec(task).host
    if not isinstance(listing, list) or not all(isinstance(c, dict) for c in listing):
        raise HostError(host, "the checkpoint listing is not a list of checkpoints",
                        "Check the harness in the run folder on that host.")
    for c in listing:
        for name in c.get("files") or {}:
            host_name(name, host, "checkpoint file")
    return listing


@contextmanager
def _refusal_is_artifact(fix: str = "Pick a step from the list as it is now.", *, folder: str = ""):
    """hostctl's refusal of a checkpoint action (a step gone, a hold expired) is about the
    checkpoint, not the host: an ArtifactError with the host's reason. A full disk is neither:
    it says so, and which folder to free (the path in the error, else ``folder``: the action's)."""
    try:
        yield
    except remote.Refused as err:
        folder = diagnose.full_folder(err.reason, unknown=folder or None)
        if folder is not None:   # a full disk is not the checkpoint's fault: another step fails too
            raise ArtifactError(f"disk full on {err.host}: {err.reason.rstrip('.')}.",
                                f"Free space in {folder} and on the rest of that disk (old checkpoints, "
                                "exports, logs), then try again.") from None
        raise ArtifactError(err.reason.rstrip(".") + ".", fix) from None


def _chief_or(run: Run, task: str | None) -> str:
    return task or run.state.chief.name


def checkpoint_dir(run: Run, task: str) -> str:
    """``task``'s checkpoint folder on its host (the chief's real ones, a worker's own copy)."""
    return f"{run.task(task).remote_run_dir}/{_folder(run, task)}"


def _folder(run: Run, task: str) -> str:
    """``checkpoint_dir``, relative to the run directory (hostctl's ``--dir``)."""
    if task == run.state.chief.name:
        return layout.CHECKPOINTS
    return f"{layout.WORKER_CHECKPOINTS}/{task}"


def list_checkpoints(run: Run, task: str | None = None) -> list[dict]:
    """Checkpoints of the chief (or of ``task``) that retention keeps, oldest first: each with
    its meta, files and sizes, and ``held`` (the purposes of the actions holding it)."""
    task = _chief_or(run, task)
    with _refusal_is_artifact(folder=checkpoint_dir(run, task)):
        listing = remote.ckpt_list(run.remote(task), _folder(run, task))
    return _checked_listing(run, task, listing)


def list_abandoned(run: Run, task: str | None = None) -> list[dict]:
    """Checkpoints that restores moved aside (each names its ``abandoned`` folder)."""
    task = _chief_or(run, task)
    with _refusal_is_artifact(folder=checkpoint_dir(run, task)):
        listing = remote.ckpt_abandoned(run.remote(task), _folder(run, task))
    return _checked_listing(run, task, listing)


def pin(run: Run, step: int | None, *, purpose: str, ttl_s: float | None) -> Hold:
    """Hold ``step`` in the chief's folder (None: the newest, resolved now); ArtifactError if gone."""
    chief = run.state.chief.name
    with _refusal_is_artifact(folder=checkpoint_dir(run, chief)):
        answer = remote.ckpt_hold(run.remote(chief), _folder(run, chief), step, purpose=purpose, ttl_s=ttl_s)
    return Hold(chief, int(answer["step"]), answer["hold"], purpose)


def release(run: Run, hold: Hold) -> None:
    with _refusal_is_artifact(folder=checkpoint_dir(run, hold.task)):
        remote.ckpt_release(run.remote(hold.task), _folder(run, hold.task), hold.hold_id)


def abandon_after(run: Run, task: str, step: int, *, tag: str, keep: Hold | None) -> list[int]:
    """Move ``task``'s checkpoints newer than ``step`` aside (a restore, a resume past damaged
    ones); the steps moved."""
    with _refusal_is_artifact(folder=checkpoint_dir(run, task)):
        return remote.ckpt_abandon(run.remote(task), _folder(run, task), after=step, tag=tag,
                                         keep_hold=keep.hold_id if keep else None)


VERIFY_TIMEOUT_S = 300   # TensorFlow's import on a loaded host, then a read of the files


def verify(run: Run, task: str, steps: list[int]) -> tuple[int | None, dict[int, str]]:
    """Read ``task``'s ``steps`` newest first on its host with TensorFlow's checkpoint reader,
    until one reads whole: (that step or None, step -> why each newer one cannot be restored, in
    export's words)."""
    with _refusal_is_artifact(folder=checkpoint_dir(run, task)):
        answer = remote.ckpt_verify(run.remote(task), _folder(run, task), steps, timeout=VERIFY_TIMEOUT_S)
    good, damaged = answer.get("good"), answer.get("damaged") or {}
    return (None if good is None else int(good)), {int(s): str(why) for s, why in damaged.items()}


@contextmanager
def held(run: Run, step: int | None, *, purpose: str, ttl_s: float) -> Iterator[Hold]:
    hold = pin(run, step, purpose=purpose, ttl_s=ttl_s)
    try:
        yield hold
    finally:
        release(run, hold)


@audit.recorded("save_now")
def save_now(run: Run, *, wait_s: float = 0) -> int | None:
    """Ask every worker to save at the next sync point; with ``wait_s``, return the step saved."""
    if not run.state.live:
        raise RunError(f"run {run.run_id} is {run.state.phase}, not live",
                       "Save now works on a running job; its last checkpoints are listed below.")
    if run.state.phase == "queued":   # a request now would wait for the whole queue
        raise RunError(f"run {run.run_id} is queued: Slurm has not started it, so nothing can be saved yet",
                       "Save once its status says running; Stop cancels the queued job at once.")
    chief = run.remote(run.state.chief.name)
    name = remote.request_save(chief)
    if not wait_s:
        return None
    deadline, attempt, looked = time.time() + wait_s, run.state.attempt, 0.0
    while time.time() < deadline:
        with _refusal_is_artifact("Save checkpoints where the console lists them "
                                  "(docs/job-contract.md, 'Custom training loops'), then Save now again."):
            step = remote.save_done(chief, name)
        if step is not None:
            return int(step)
        if time.time() - looked >= SETTLE_EVERY_S:
            looked = time.time()
            ended = attempt_ended(run, attempt)
            if ended is not None:
                # The chief answers a request it sees at its last step with that step's
                # checkpoint; one that arrived after that, or an attempt that failed (the save
                # itself, on a full disk), is never answered: say so now rather than at the
                # deadline. One more look: the answer may have come with the end.
                step = remote.save_done(chief, name)
                if step is not None:
                    return int(step)
                raise RunError(ended, "Its last checkpoints are listed below; export or restore one of those.")
        time.sleep(0.5)
    raise RunError(f"no save after {wait_s:.0f} s", "The job may be stuck or between epochs; check its log.")


SETTLE_EVERY_S = 2.0   # save_now reads the tasks this often: an attempt that failed is told at once
UNDERWAY = ("running", "queued", "launching")


def attempt_ended(run: Run, attempt: int, *, before: str = "it saved") -> str | None:
    """None while ``attempt`` goes on; else what ended, and why when it is known. Read from the
    tasks (``settle``), not the record alone: a run nobody settles stays "running" in its record
    after its tasks have failed, and a kept run's keeper records the failure only after its poll."""
    try:
        statuses = run.settle()
    except (HostError, RunError):
        statuses = []   # a host that hiccups: the saved step or the deadline tells
    state = run.state
    failed = [s for s in statuses if s.failed]
    if state.attempt == attempt and state.phase in UNDERWAY and not failed:
        return None
    ended = next((a for a in state.attempts if a.number == attempt), None)
    reason = ended.reason if ended is not None and ended.reason else None
    if reason is None and failed:   # not recorded yet (its keeper's next poll): the tasks say
        first = sorted(failed, key=lambda s: diagnose.casualty(s.diagnosis))[0]
        reason = f"{first.name} {first.label}" + (
            f": {diagnose.on_host(first.diagnosis, first.host)}" if first.diagnosis else "")
    what = (f"run {run.run_id} ended ({state.phase})" if not state.live else
            f"attempt {attempt} of run {run.run_id} ended ({state.phase} now)" if state.attempt != attempt
            else f"attempt {attempt} of run {run.run_id} failed")
    return f"{what} before {before}" + (f": {reason}" if reason else "")


def require_export_name(name: str | None) -> None:
    """An export's name (None: the default) must be a plain folder name on the chief."""
    if name is not None and (not NAME.match(name) or ".." in name):
        raise ArtifactError(f"export name {name!r} is not valid",
                            "Use letters, digits, '.', '_' and '-' (no '/').")


@audit.recorded("export", "step", "name", "formats")
def export(run: Run, *, step: int | None = None, name: str | None = None,
           formats: tuple[str, ...] = ("savedmodel", "keras"),
           on_step: Callable[[int], None] | None = None) -> dict:
    """Export a checkpoint (None: the newest) on the chief's host and verify it in a fresh process.

    The step is held before anything else; ``on_step`` hears which one before the work starts.
    """
    require_export_name(name)
    with held(run, step, purpose="export", ttl_s=EXPORT_TIMEOUT_S + 300) as hold:
        if on_step is not None:
            on_step(hold.step)
        return _export_step(run, hold.step, name, formats)


def _export_step(run: Run, step: int, name: str | None, formats: tuple[str, ...]) -> dict:
    chief = run.state.chief.name
    with _refusal_is_artifact("Earlier exports and checkpoints are untouched; pick another checkpoint "
                              "or fix the cause."):
        # A command job has no module: export builds the model its KerasCallback described.
        job = f"{layout.JOB}/{Path(run.job.module).name}" if run.job.module else None
        answer = remote.export(run.remote(chief), job, step=step,
                               name=name, formats=formats, timeout=EXPORT_TIMEOUT_S)
    host_name(answer.get("name"), run.task_spec(chief).host, "export")   # a download folder's name
    return answer


def list_exports(run: Run) -> list[dict]:
    try:
        return remote.exports(run.remote(run.state.chief.name))
    except HostError:
        return []


def fetch_export_file(run: Run, name: str, relative: str, local_path: str) -> str:
    """Copy one file of an export (``model.keras``) to this machine, for download."""
    if not NAME.match(name) or ".." in relative or relative.startswith("/"):
        raise ArtifactError(f"{name}/{relative} is not a valid export file", "Pick one from the list.")
    remote.fetch_file(run.remote(run.state.chief.name), f"{layout.EXPORTS}/{name}/{relative}", local_path)
    return local_path


def download_dir(run: Run, name: object) -> Path:
    """The local folder for downloads of the export ``name`` (a name the chief reported), made."""
    folder = run.local_dir / "downloads" / host_name(name, run.task_spec(run.state.chief.name).host, "export")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


CLOCK = "%Y-%m-%d %H:%M:%S"


def checkpoint_rows(found: list[dict], *, columns: tuple[str, ...] = ("step", "epoch", "loss", "time", "bytes"),
                    clock: str = CLOCK) -> list[dict]:
    """Checkpoints as table rows, oldest first: the one builder, for the command line and the
    page. ``columns`` from: step, epoch, loss, time (``clock``), bytes, size (KB), held by, and
    moved by (only a checkpoint a restore moved aside has one). After "loss" come the other
    metrics the checkpoint's metadata holds (global values at its step: accuracy, val_loss ...),
    by metric_line's reader rules."""
    rows = []
    for c in sorted(found, key=lambda c: c.get("step", 0)):
        named, _ = metric_line.named(c.get("metrics"))
        files = c.get("files") or {}
        size = sum(files.values()) if files else None
        cells = {"step": c.get("step"), "epoch": c.get("epoch"), "loss": c.get("global_loss"),
                 "time": time.strftime(clock, time.localtime(c["time"])) if c.get("time") else "",
                 "bytes": size, "size (KB)": None if size is None else round(size / 1024, 1),
                 "held by": ", ".join(c.get("held") or [])}
        if "abandoned" in c:
            cells["moved by"] = c["abandoned"]
        row = {}
        for k in columns:
            if k in cells:
                row[k] = cells[k]
            if k == "loss":
                row.update(named)
        rows.append(row)
    return rows


def newest_anywhere(listings: dict[str, list[dict]]) -> tuple[int | None, dict[str, str]]:
    """The newest step that any task holds complete (task -> its listing), and for each task that
    lacks it, a task to copy it from; (None, {}) when no task holds any. Pure."""
    holders: dict[int, list[str]] = {}
    for task, found in listings.items():
        for c in found:
            holders.setdefault(int(c["step"]), []).append(task)
    if not holders:
        return None, {}
    step = max(holders)
    return step, {task: holders[step][0] for task in listings if task not in holders[step]}


def copy_step(run: Run, step: int, source: str, target: str, scratch: Path) -> None:
    """Copy ``source``'s checkpoint ``step`` into ``target``'s folder (each worker keeps a full
    copy, byte-identical to the chief's: docs/facts.md #5), then check that ``target`` lists it
    complete with the same file sizes. The meta file goes last: only with it is the copy listed."""
    found = {c["step"]: c for c in list_checkpoints(run, source)}
    if step not in found:
        raise ArtifactError(f"{source} no longer holds checkpoint step {step}",
                            "Restore from a step that the run's hosts still hold.")
    files = found[step].get("files") or {}
    scratch.mkdir(parents=True, exist_ok=True)
    for name in sorted(files, key=lambda n: n.endswith(".meta.json")):
        local = scratch / host_name(name, run.task_spec(source).host, "checkpoint file")
        remote.fetch_file(run.remote(source), f"{_folder(run, source)}/{name}", local)
        remote.push_file(run.remote(target), local, f"{_folder(run, target)}/{name}")
        local.unlink()
    copied = {c["step"]: c for c in list_checkpoints(run, target)}.get(step)
    if copied is None or (copied.get("files") or {}) != files:
        raise ArtifactError(f"the copy of checkpoint step {step} from {source} to {target} does not match "
                            f"({copied.get('files') if copied else 'not listed'} vs {files})",
                            f"Check the disk of {run.task_spec(target).host}, then restore from step {step}.")


def common_checkpoint(run: Run) -> int | None:
    """The newest step that every task holds complete; None means start from scratch."""
    steps = [{c["step"] for c in list_checkpoints(run, t.name)} for t in run.state.tasks]
    common = set.intersection(*steps) if steps else set()
    return max(common) if common else None
