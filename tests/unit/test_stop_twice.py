"""A second stop of a run that has already ended (the same Stop click delivered twice by a busy
console, issue 35) changes nothing: the first stop's record and saved step stay, and it waits for
no save. The engine is a stand-in for the hosts; the save is the first stop's answer."""
from __future__ import annotations

import time

from backend.engines.base import StopReport
from backend.hosts.pool import Pool
from backend.runs import handle
from backend.runs.handle import Run
from backend.records.outcome import TaskPhase, TaskStatus
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState
from backend.config.spec import JobKind, JobSpec, job_to_dict


class Hosts:
    """What the hosts answer: tasks running until a stop, which ends them."""

    def __init__(self) -> None:
        self.stops = 0

    def status(self, run) -> list[TaskStatus]:
        phase = TaskPhase.EXITED if self.stops else TaskPhase.RUNNING
        return [TaskStatus(n, "127.0.0.1", phase) for n in ("worker-0", "worker-1")]

    def stop(self, run, *, grace_s: float) -> StopReport:
        self.stops += 1
        return StopReport()

    def log_tail(self, run, task: str, max_bytes: int) -> str:
        return ""


def _run(tmp_path) -> tuple[Run, Hosts]:
    store = RunStore(tmp_path / "runs")
    job = JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py"))
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": 24000 + i}
                         for i in range(2)]}
    state = RunState("r1", time.time(), cluster, job_to_dict(job),
                     [TaskState(f"worker-{i}", i, "127.0.0.1", str(tmp_path / "host" / "r1")) for i in range(2)],
                     [Attempt(1, time.time())], Phase.RUNNING)
    store.reserve("r1")
    store.save(state)
    hosts = Hosts()
    return Run(store.load("r1"), store, Pool(), engine=hosts), hosts


def test_a_second_save_stop_of_an_ended_run_keeps_the_first_record_and_waits_for_nothing(tmp_path, monkeypatch):
    run, hosts = _run(tmp_path)
    saves = []

    def save_then_exit(self, within_s):   # every worker saved step 260, then exited
        saves.append(within_s)
        step = 260 if len(saves) == 1 else None
        return step, f"saved at step {step} on every worker"
    monkeypatch.setattr(Run, "_save_then_exit", save_then_exit)
    run.stop(save=True)
    first = run.store.load("r1")
    assert first.phase == "stopped" and run.saved_step == 260
    assert first.attempts[-1].reason == "stopped: saved at step 260 on every worker"

    began = time.time()
    for again in (run, Run(run.store.load("r1"), run.store, Pool(), engine=hosts)):  # same handle, or another
        report = again.stop(save=True)
        assert report.clean and again.saved_step == 260
    assert time.time() - began < 5 and saves == [60.0]   # no second save asked, nothing waited
    assert hosts.stops == 1
    after = run.store.load("r1")
    assert after.phase == "stopped" and after.attempts[-1].reason == first.attempts[-1].reason
    assert after.attempts[-1].last_step == 260 and after.unreachable == first.unreachable


def test_a_stop_after_a_plain_stop_names_no_saved_step(tmp_path):
    run, hosts = _run(tmp_path)
    run.stop()
    assert run.stop().clean and run.saved_step is None and hosts.stops == 1
    assert run.store.load("r1").attempts[-1].reason == "stopped"
