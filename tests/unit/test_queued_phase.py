"""A run whose job waits in the scheduler's queue is recorded ``queued`` (issue 30): the record,
``status --json``, the API's ``state.phase`` and the keeper all agree, and the run moves to
``running`` once the scheduler starts it. The engine here is a stand-in that answers with the
statuses a Slurm engine gives for a pending and then a running job (no Slurm needed)."""
from __future__ import annotations

import time

import pytest

from backend import checkpoints
from backend.runs.status_view import status_json
from backend.engines.base import Capabilities, StopReport
from backend.config.slurm_spec import slurm_from_dict, slurm_to_dict
from backend.config.spec import JobKind, JobSpec, job_to_dict
from backend.errors import RunError
from backend.hosts.pool import Pool
from backend.runs.handle import Run
from backend.runs.keeper import Keeper
from backend.records.outcome import LifeWatch, TaskPhase, TaskStatus, Verdict, conclude
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState

QUEUE = "Resources, 1st of 2 waiting"


class Scheduler(Capabilities):
    """The engine's status answers, switched by the test."""

    def __init__(self) -> None:
        self.now = [TaskStatus(n, "login1", TaskPhase.QUEUED, queue=QUEUE) for n in ("chief-0", "worker-0")]

    def status(self, run) -> list[TaskStatus]:
        return list(self.now)

    def stop(self, run, *, grace_s: float) -> StopReport:
        return StopReport()

    def log_tail(self, run, task: str, max_bytes: int) -> str:
        return ""

    def start(self) -> None:
        self.now = [TaskStatus(n, "login1", TaskPhase.RUNNING) for n in ("chief-0", "worker-0")]


def a_run(tmp_path, **restart) -> tuple[Run, Scheduler]:
    store = RunStore(tmp_path / "runs")
    job = JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py"),
                  restart={"mode": "on_failure", **restart} if restart else {})
    state = RunState("r1", time.time(), slurm_to_dict(slurm_from_dict({"kind": "slurm", "host": "login1"})),
                     job_to_dict(job), [TaskState("chief-0", 0, "login1", "/shared/r1"),
                                        TaskState("worker-0", 1, "login1", "/shared/r1")],
                     [Attempt(1, time.time())], Phase.RUNNING)
    store.reserve("r1")
    store.save(state)
    scheduler = Scheduler()
    return Run(store.load("r1"), store, Pool(), engine=scheduler), scheduler


def test_a_pending_job_is_recorded_queued_for_every_reader_then_running_once_started(tmp_path):
    run, scheduler = a_run(tmp_path)
    statuses = run.status()
    assert run.state.phase == "queued" and run.state.live
    assert run.store.load("r1").phase == "queued"   # the record: the runs list, a new attach
    shown = status_json(run, statuses, health_line="")
    assert (shown["phase"], shown["queue"]) == ("queued", QUEUE), shown
    assert run.shown_phase(statuses) == f"queued ({QUEUE})"
    assert conclude(statuses).verdict == Verdict.GOING
    with pytest.raises(RunError, match="queued: Slurm has not started it"):
        checkpoints.save_now(run)
    scheduler.start()
    statuses = run.settle()
    assert run.store.load("r1").phase == "running" and run.shown_phase(statuses) == "running"
    assert status_json(run, statuses, health_line="")["queue"] is None


def test_a_stopped_run_stays_stopped_whatever_the_queue_says(tmp_path):
    run, _ = a_run(tmp_path)
    run.store.move("r1", Phase.STOPPED, when=(Phase.RUNNING,))
    run.reload()
    run.status()
    assert run.store.load("r1").phase == "stopped"


def test_the_keeper_does_not_take_a_long_wait_in_the_queue_for_a_stall(tmp_path, monkeypatch):
    run, scheduler = a_run(tmp_path, stall_timeout_s=1.0)
    keeper = Keeper("r1", store=run.store, log=lambda msg: None)
    keeper.life = LifeWatch(changed=time.time() - 3600)   # an hour with no sign of life
    # No host here: no metrics and no CPU to read, no stacks to dump, as for a job not started.
    monkeypatch.setattr(keeper, "_read_progress", lambda run: None)
    monkeypatch.setattr(keeper, "_read_life", lambda run: None)
    monkeypatch.setattr("backend.runs.keeper.stacks.dump_and_save", lambda run, label: ([], None))
    keeper._attach = lambda: Run(run.store.load("r1"), run.store, Pool(), engine=scheduler)
    assert keeper.check() is None
    assert run.store.load("r1").phase == "queued" and run.store.load("r1").attempts[-1].ended is None
