"""Slurm's own requeue (issue 29 item 2), without a cluster: the batch script's re-run resumes from
the newest checkpoint every task holds as the next attempt, and the keeper does not count the
cluster's requeues as restarts of its own. The real requeue is tests/slurm_cluster/test_slurm_requeue.py."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from tests.harness.conftest import host_argv

from backend.config.slurm_spec import slurm_from_dict, slurm_to_dict
from backend.config.spec import JobKind, JobSpec, job_to_dict
from backend.engines.base import Capabilities, StopReport
from backend.engines.slurm_states import parse_scontrol
from backend.hosts.pool import Pool
from backend.runs import keeper as keeper_module
from backend.runs import restorable
from backend.runs.handle import Run

from backend.runs.keeper import Keeper
from backend.records.outcome import TaskPhase, TaskStatus
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState, TaskState



def _checkpoint(folder: Path, step: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ckpt-{step}.index").write_text("x")
    (folder / f"ckpt-{step}.data-00000-of-00001").write_text("x")
    (folder / f"ckpt-{step}.meta.json").write_text(json.dumps({"step": step}))


def test_a_requeued_re_run_resumes_every_task_from_the_newest_common_checkpoint_as_the_next_attempt(tmp_path):
    run_dir = tmp_path / "run"
    for step in (40, 80):   # the chief saved 80 on the requeue's signal; the worker did not finish it
        _checkpoint(run_dir / "checkpoints", step)
    _checkpoint(run_dir / "worker_checkpoints" / "worker-0", 40)
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "2",
           "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "vm", "SLURM_STEP_TASKS_PER_NODE": "1",
           "SLURM_STEP_NUM_TASKS": "1"}
    # The batch script, run again by Slurm: the job was submitted as attempt 3.
    subprocess.run([*host_argv(str(tmp_path / "shipped"), "slurm_task", site=False), "requeue", "--run-dir", str(run_dir), "--attempt", "3",
                    "--task", "chief-0", "--task", "worker-0"], env=env, check=True, timeout=60)
    record = json.loads((run_dir / "slurm" / "requeued.json").read_text())
    assert (record["job"], record["restart"], record["attempt"], record["resume_step"]) == ("7", 2, 5, 40)
    # Each task: the harness command line it was written with becomes the new attempt's.
    train = run_dir / "lib" / "__main__.py"   # stands in for the shipped entry: prints what it got
    train.parent.mkdir()
    train.write_text("import json, os, sys\n"
                     "print(json.dumps({'argv': sys.argv[1:], 'attempt': os.environ['TFCONSOLE_ATTEMPT'],"
                     " 'resume': os.environ['TFCONSOLE_RESUME_STEP']}))\n")
    out = subprocess.run([*host_argv(str(tmp_path / "shipped"), "slurm_task", site=False), "run", "--run-dir",
                          str(run_dir), "--tf-port", "23456",
                          "--", sys.executable, str(train.parent), "train", "--run-dir", str(run_dir), "--attempt", "3",
                          "--param", "pace_s=0.1", "--resume-step", "10"],
                         env=env, capture_output=True, text=True, check=True, timeout=60).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen == {"argv": ["train", "--run-dir", str(run_dir), "--attempt", "5", "--param", "pace_s=0.1",
                             "--resume-step", "40"], "attempt": "5", "resume": "40"}, seen
    assert "=== tfconsole attempt 5 " in out


def test_a_re_run_without_its_record_fails_rather_than_train_from_the_wrong_step(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "SLURM_PROCID": "0",
           "SLURM_STEP_NODELIST": "vm", "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_STEP_NUM_TASKS": "1"}
    proc = subprocess.run([*host_argv(str(tmp_path / "shipped"), "slurm_task", site=False), "run", "--run-dir", str(tmp_path), "--tf-port",
                           "23456", "--", sys.executable, "-c", "pass"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and "finds no record of its own" in proc.stderr, proc.stderr


def test_scontrol_restarts_are_read():
    job = parse_scontrol("JobId=7 JobName=x JobState=PENDING Reason=BeginTime Requeue=1 Restarts=2 "
                         "BatchFlag=1 ExitCode=0:0 NodeList=(null) TimeLimit=10:00")
    assert (job.phase, job.restarts, job.queue) == ("pending", 2, "BeginTime")


class _Engine(Capabilities):   # the neutral answers of every engine
    def __init__(self) -> None:
        self.begun: list[int | None] = []

    def status(self, run):
        return [TaskStatus(n, "login1", TaskPhase.RUNNING) for n in ("chief-0", "worker-0")]

    def begin(self, run, *, attempt, resume_step):
        self.begun.append(resume_step)
        return {}

    def stop(self, run, *, grace_s):
        return StopReport()

    def log_tail(self, run, task, max_bytes):
        return ""


def test_the_clusters_requeues_do_not_count_against_max_restarts(tmp_path, monkeypatch):
    """max_restarts=1: attempt 1 was requeued by Slurm, attempt 2 failed: the keeper's one
    restart is still to come (before: the requeue counted, and the keeper gave up)."""
    store = RunStore(tmp_path / "runs")
    job = JobSpec(kind=JobKind.COMMAND, command=("python", "fit.py"),
                  restart={"mode": "on_failure", "max_restarts": 1, "backoff_s": 0})
    now = time.time()
    state = RunState("r1", now, slurm_to_dict(slurm_from_dict({"kind": "slurm", "host": "login1"})),
                     job_to_dict(job), [TaskState("chief-0", 0, "login1", "/shared/r1"),
                                        TaskState("worker-0", 1, "login1", "/shared/r1")],
                     [Attempt(1, now, ended=now, reason="requeued by Slurm: job 7 went back to the queue "
                                                         "(restart 1); no save on its signal; the same job "
                                                         "resumes from step 40"),
                      Attempt(2, now, resume_step=40, ended=now, reason="worker-0 exited(1)")],
                     Phase.RESTARTING)
    store.reserve("r1")
    store.save(state)
    engine = _Engine()
    monkeypatch.setattr(keeper_module.restorable, "newest_common", lambda run: restorable.Choice(40))
    keeper = Keeper("r1", store=store, poll_s=0.01, log=lambda msg: None)
    keeper._attach = lambda: Run(store.load("r1"), store, Pool(), engine=engine)
    assert keeper.check() is None
    after = store.load("r1")
    assert (after.phase, len(after.attempts), engine.begun) == ("running", 3, [40]), after


def test_the_engine_reports_a_requeue_once_the_old_processes_ended_and_takes_the_re_runs_own_step(tmp_path):
    from types import SimpleNamespace

    from backend.engines.slurm import SlurmEngine
    (tmp_path / "slurm.json").write_text(json.dumps({"jobs": {"1": "9", "2": "7"}}))   # attempt 2 = job 7
    run = SimpleNamespace(local_dir=tmp_path, state=SimpleNamespace(attempt=2))
    engine = SlurmEngine.__new__(SlurmEngine)

    def seen(state: str, restarts: int, record: dict | None = None):
        engine._seen = (parse_scontrol(f"JobId=7 JobState={state} Restarts={restarts} ExitCode=0:0"), record)
        return engine.requeued(run)
    assert seen("RUNNING", 0) is None
    assert seen("COMPLETING", 1) is None and seen("REQUEUED", 1) is None   # a save may be under way
    found = seen("PENDING", 1)
    assert (found.job_id, found.restart, found.attempt, found.known) == ("7", 1, 3, False)
    found = seen("RUNNING", 1, {"job": "7", "restart": 1, "attempt": 3, "resume_step": 55})
    assert (found.attempt, found.resume_step, found.known) == (3, 55, True)
    run.state.attempt = 3   # recorded (slurm.json then maps 3 -> 7): nothing more to report
    engine.follow(run, found)
    assert seen("RUNNING", 1) is None and SlurmEngine.jobs(run)["3"] == "7"
