"""Who runs the next attempt when a host is gone for good: its tasks move to spare hosts.

A MultiWorkerMirroredStrategy cluster is fixed when it starts, so "elastic" here means the next
attempt starts on other hosts. The keeper judges a host gone (``Attempt.lost``: unanswered over
SSH for ``restart.host_gone_s``, or failing preflight's SSH check at the restart); then:

1. ``plan``, pure: each task on a lost host takes the next spare of ``spares:`` (chief included:
   the spare takes the task's role), the others stay where they are;
2. ``replace_lost``: preflight the new membership; a spare that fails is skipped and named and
   the next one tried, a member whose host does not answer is lost too;
3. ``apply``: the run's record says where each task is now (``state.cluster``, each task's host
   and run folder); TF_CONFIG follows from that cluster through the one builder at the start;
4. ``resume_step``: the newest checkpoint that any task holds, copied to every task that lacks
   it (a spare has none; a new chief needs the real folder) and checked before training resumes.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend import checkpoints
from backend.config import jobfit
from backend.config.spec import JobKind, ShrinkMode, cluster_from_dict
from backend.client.harness.contract import layout, taskenv
from backend.hosts import remote
from backend.hosts.preflight import run_preflight
from backend.runs.handle import Run
from backend.records.state import RunState

NO_SPARE_FIX = ("to survive this, list spare hosts under `spares:` in the cluster file (the keeper "
                "moves a lost host's tasks there), or set `min_workers:` to go on with fewer tasks")

SKIPPED_FIX = ("to survive this, fix the spares skipped above (each says why), list more under `spares:`, "
               "or set `min_workers:` to go on with fewer tasks")


@dataclass(frozen=True)
class Move:
    task: str
    old: str      # the lost host
    new: str      # the spare's host
    spare: int    # its index in the cluster's spares


@dataclass
class Plan:
    tasks: list[dict]                  # the cluster's tasks for the next attempt (saved form)
    spares: list[dict]                 # the spares left after it
    moves: list[Move] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)   # tasks on a lost host with no spare left
    skipped: dict[str, str] = field(default_factory=dict)   # spare host -> why preflight refused it
    dropped: list[str] = field(default_factory=list)   # shrunk: tasks that no longer run (min_workers)
    why_not: str = ""   # why it could not shrink although min_workers allowed it


def plan(cluster: dict, names: list[str], lost: set[str], refused: set[int] = frozenset()) -> Plan:
    """Move every task on a ``lost`` host to the next spare not in ``refused`` (indexes), in order."""
    spares = list(cluster.get("spares") or [])
    free = [i for i in range(len(spares)) if i not in refused]
    tasks, moves, missing = [], [], []
    for name, task in zip(names, cluster["tasks"]):
        if task["host"] not in lost:
            tasks.append(task)
        elif free:
            i = free.pop(0)
            tasks.append({**spares[i], "role": task["role"]})
            moves.append(Move(name, task["host"], spares[i]["host"], i))
        else:
            tasks.append(task)
            missing.append(name)
    used = {m.spare for m in moves}
    found = Plan(tasks, [s for i, s in enumerate(spares) if i not in used], moves, missing)
    return _shrink(found, names, cluster.get("min_workers")) if missing else found


def _shrink(found: Plan, names: list[str], least: int | None) -> Plan:
    """No spare for ``found.missing``: run without them if at least ``least`` training tasks stay
    (the first worker left becomes the chief when the chief is dropped), else leave it missing."""
    kept = [(n, t) for n, t in zip(names, found.tasks) if n not in found.missing]
    training = [t for _, t in kept if t["role"] in ("chief", "worker")]
    if not least or len(training) < max(least, 1):
        return found
    tasks = [t for _, t in kept]
    if not any(t["role"] == "chief" for t in tasks) and any(t["role"] == "chief" for t in found.tasks):
        first = next(i for i, t in enumerate(tasks) if t["role"] == "worker")
        tasks[first] = {**tasks[first], "role": "chief"}
    return Plan(tasks, found.spares, found.moves, [], found.skipped, dropped=list(found.missing))


def replace_lost(run: Run, lost: dict[str, str]) -> Plan:
    """A checked plan: preflight the new membership; skip (and name) each spare that fails it,
    count a member that does not answer SSH as lost too (``lost`` grows), until it passes or no
    spare is left (``Plan.missing``). Each round drops a spare or adds a host: it ends."""
    names = run.cluster.task_names()
    refused: dict[int, str] = {}
    while True:
        found = plan(run.state.cluster, names, set(lost), set(refused))
        spares = run.state.cluster.get("spares") or []
        found.skipped = {spare_label(spares, i): why for i, why in refused.items()}
        if found.dropped:
            refusal = _batch_refusal(run, found)
            if refusal:   # the global batch must still split over the replicas left
                return replace(found, missing=found.dropped, dropped=[], why_not=refusal)
        if found.missing or not found.moves:
            return found
        moved = {m.task: m for m in found.moves}
        bad = [r for r in run_preflight(cluster_from_dict({"tasks": found.tasks}), run.pool) if not r.ok]
        if not bad:
            return found
        for report in bad:
            why = "; ".join(report.problems())
            if report.task in moved:
                refused[moved[report.task].spare] = why
            elif not report.checks.get("ssh", {}).get("ok"):
                lost[report.host] = f"failed preflight at the restart ({why})"
        if not any(r.task in moved or not r.checks.get("ssh", {}).get("ok") for r in bad):
            return found   # members' other problems (a port still held): the start will say


def _batch_refusal(run: Run, found: Plan) -> str:
    """Why the job cannot run on the shrunk cluster (its global batch does not split), or "".
    Keeping each replica's batch always splits: the global batch becomes a multiple of it."""
    if run.job.restart.shrink is ShrinkMode.KEEP_REPLICA_BATCH:
        return ""
    bad = [f for f in jobfit.check_job(cluster_from_dict({"tasks": found.tasks}), run.job) if f.level == "error"]
    return bad[0].problem if bad else ""


@dataclass(frozen=True)
class Shrink:
    """The numbers of a shrunk run, relative to its launch (several shrinks compound)."""
    mode: ShrinkMode
    launch_replicas: int
    before: int                      # replicas of the attempt that lost a host
    replicas: int                    # replicas from now on
    batch_before: int | None         # the global batch before (harness jobs; None: the job's own)
    global_batch_size: int | None
    lr_scale: float

    def env(self) -> dict[str, str]:
        found = {taskenv.SHRINK: self.mode.value, taskenv.LAUNCH_REPLICAS: str(self.launch_replicas),
                 taskenv.REPLICAS: str(self.replicas), taskenv.LR_SCALE: repr(self.lr_scale)}
        return ({**found, taskenv.GLOBAL_BATCH_SIZE: str(self.global_batch_size)}
                if self.global_batch_size else found)

    def text(self) -> str:
        """What the attempt's reason says of the batch and learning rate."""
        if self.mode is ShrinkMode.KEEP_GLOBAL_BATCH:
            return (f"global batch {self.global_batch_size} kept ({self.global_batch_size // self.replicas} "
                    f"per task)" if self.global_batch_size else "global batch kept")
        per = (f" {self.batch_before // self.before} kept: global batch {self.batch_before} -> "
               f"{self.global_batch_size}" if self.global_batch_size else " kept")
        return (f"per-replica batch{per}, learning rate x{self.lr_scale:.4g} ({self.replicas} of "
                f"{self.launch_replicas} replicas; restart.shrink {self.mode.value})")


def shrink_of(run: Run, found: Plan) -> Shrink:
    """The batch and learning rate the shrunk cluster ``found`` runs with (``restart.shrink``)."""
    mode, env = run.job.restart.shrink, run.job.env
    before = jobfit.replicas(run.cluster)
    after = jobfit.replicas(cluster_from_dict({"tasks": found.tasks}))
    launched = int(env.get(taskenv.LAUNCH_REPLICAS) or before)
    batch = jobfit.effective_params(run.job).get("global_batch_size") if run.job.kind == JobKind.HARNESS else None
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) else None
    if mode is ShrinkMode.KEEP_GLOBAL_BATCH:
        return Shrink(mode, launched, before, after, batch, batch, 1.0)
    return Shrink(mode, launched, before, after, batch, batch // before * after if batch else None,
                  after / launched)


def shrunk_job(job: dict, shrink: Shrink) -> dict:
    """The run's saved job for the shrunk attempts: the shrink's env, and a harness job's new
    global batch as its parameter (the harness reads it as any --param)."""
    out = {**job, "env": {**(job.get("env") or {}), **shrink.env()}}
    if shrink.global_batch_size:
        out["params"] = {**(job.get("params") or {}), "global_batch_size": shrink.global_batch_size}
    return out


def shrink_shown(job) -> dict | None:
    """The run's shrink as its job's env records it (status, Monitor), or None when it never shrank."""
    env = job.env
    if taskenv.SHRINK not in env:
        return None
    batch = env.get(taskenv.GLOBAL_BATCH_SIZE)
    return {"mode": env[taskenv.SHRINK], "launch_replicas": int(env[taskenv.LAUNCH_REPLICAS]),
            "replicas": int(env[taskenv.REPLICAS]), "lr_scale": float(env[taskenv.LR_SCALE]),
            "global_batch_size": int(batch) if batch else None}


def shrink_line(job) -> str:
    """``shrunk: 3 -> 2 replicas, keep_replica_batch: global batch 20, learning rate x0.6667``."""
    found = shrink_shown(job)
    if not found:
        return ""
    batch = f", global batch {found['global_batch_size']}" if found["global_batch_size"] else ""
    return (f"shrunk: {found['launch_replicas']} -> {found['replicas']} replicas, {found['mode']}{batch}, "
            f"learning rate x{found['lr_scale']:.4g}")


def shrunk_text(run: Run, found: Plan) -> str:
    """``no spare left: runs on 2 tasks without worker-1 (min_workers 2); global batch 30 kept``."""
    return (f"no spare left: runs on {len(found.tasks)} task(s) without {', '.join(found.dropped)} "
            f"(min_workers {run.state.cluster.get('min_workers')}); {shrink_of(run, found).text()}")


def apply(run: Run, found: Plan) -> Run:
    """Record the new membership: the cluster, and each moved task's host and run folder (the same
    folder name, under the spare's workdir). Returns a handle that sees it."""
    moved = {m.task for m in found.moves}
    names = cluster_from_dict({"tasks": found.tasks}).task_names()
    shrink = shrink_of(run, found) if found.dropped else None

    def change(state: RunState) -> None:
        state.cluster = {**state.cluster, "tasks": found.tasks, "spares": found.spares}
        if shrink:   # what the tasks of the shrunk attempts run with (restart.shrink)
            state.job = shrunk_job(state.job, shrink)
        if not found.spares:
            state.cluster.pop("spares")
        # Shrunk: the tasks left take the names and places of the smaller cluster (worker-2 is
        # worker-1 now), as TF_CONFIG numbers them; a task's host and run folder stay its own.
        state.tasks = [t for t in state.tasks if t.name not in found.dropped]
        for position, t in enumerate(state.tasks):
            if t.name in moved:
                spec = found.tasks[position]
                t.host = spec["host"]
                t.remote_run_dir = layout.run_dir(spec.get("workdir", "tfconsole"), os.path.basename(t.remote_run_dir))
                t.pid = t.pgid = t.started = None
            t.name, t.position = names[position], position
    run.update(change)
    return Run(run.state, run.store, run.pool)


def resume_step(run: Run, moved: list[str], harness: bytes) -> tuple[int | None, list[str]]:
    """The newest checkpoint step that any task holds, copied to every task lacking it (the moved
    tasks' folders get the harness first: hostctl writes there); returns it and the copies made."""
    for task in moved:
        remote.install(run.remote(task), harness)
    listings = {t.name: checkpoints.list_checkpoints(run, t.name) for t in run.state.tasks}
    step, sources = checkpoints.newest_anywhere(listings)
    with tempfile.TemporaryDirectory(prefix="tfconsole-move-") as scratch:
        for target, source in sources.items():
            checkpoints.copy_step(run, step, source, target, Path(scratch))
    return step, [f"{target} from {source}" for target, source in sources.items()]


def spare_label(spares: list[dict], i: int) -> str:
    """How a reason names spare ``i``: its host, or host:tf_port where two spares share a host
    (each skipped spare must stay named, not overwrite the other's why)."""
    host = spares[i]["host"]
    shared = sum(1 for s in spares if s["host"] == host) > 1
    return f"{host}:{spares[i].get('tf_port')}" if shared else host


def skipped_text(found: Plan) -> str:
    return "; ".join(f"spare {host} skipped ({why})" for host, why in found.skipped.items())


def moved_text(found: Plan) -> str:
    """What the attempt's reason adds: the spares skipped, and where each task went."""
    return "; ".join([*filter(None, [skipped_text(found)]), *(f"moved to spare {m.new}" if len(found.moves) == 1
                      else f"{m.task} moved to spare {m.new}" for m in found.moves)])


def reason(run: Run, lost: dict[str, str], found: Plan) -> str:
    """The lost attempt's reason: which host went, and what the next attempt does about it (the
    spares skipped and why, where each task went, or how it shrank), or why the run ends."""
    said, skipped = lost_text(run, lost), skipped_text(found)
    if found.missing:
        fix = (f"cannot run without it: {found.why_not}" if found.why_not else
               SKIPPED_FIX if skipped else NO_SPARE_FIX)
        return (f"{said}; no spare left for {', '.join(found.missing)}"
                + (f" ({skipped})" if skipped else "") + f"; {fix}")
    what = [moved_text(found), shrunk_text(run, found) if found.dropped else ""]
    return "; ".join([said, *filter(None, what)])


def lost_text(run: Run, lost: dict[str, str]) -> str:
    """``worker-1: host h3 unreachable for 120 s``, for each task on a lost host."""
    return "; ".join(f"{t.name}: host {t.host} {lost[t.host]}" for t in run.state.tasks if t.host in lost)
