"""Shrinking (issue 39): the job's ``restart.shrink`` says what a run shrunk by ``min_workers``
keeps: the global batch (default), or each replica's batch with the learning rate scaled by
new/launch replicas. The keeper's own steps on a real run record; the tasks' env and argv as the
hosts engine builds them; ``tfconsole status`` plain and --json. No host is touched: a shrink
without a spare needs no preflight."""
from __future__ import annotations

import json
import time

import pytest

import backend.cli.main as cli
from backend.config.spec import ShrinkMode, job_from_dict, job_to_dict
from backend.engines.direct import task_argv, task_env
from backend.errors import SpecErrors
from backend.hosts.pool import Pool
from backend.runs import detached, membership
from backend.runs.handle import Run
from backend.runs.store import RunStore
from backend.records.state import Phase, RunState, TaskState
from tests.faults.conftest import SYNTHETIC

HOSTS = ("127.0.0.1", "127.0.0.8", "127.0.0.9")   # worker-1's host is the one lost


def job(**restart) -> dict:
    return {"kind": "harness", "module": SYNTHETIC, "params": {"global_batch_size": 30},
            "restart": {"mode": "on_failure", **restart}}


def test_the_setting_is_read_checked_and_saved():
    assert job_from_dict(job()).restart.shrink is ShrinkMode.KEEP_GLOBAL_BATCH
    chosen = job_from_dict(job(shrink="keep_replica_batch"))
    assert chosen.restart.shrink is ShrinkMode.KEEP_REPLICA_BATCH
    assert job_to_dict(chosen)["restart"]["shrink"] == "keep_replica_batch"
    with pytest.raises(SpecErrors) as err:
        job_from_dict(job(shrink="halve"))
    assert "restart.shrink: unknown value 'halve'" in str(err.value)
    assert "keep_global_batch, keep_replica_batch" in str(err.value)


@pytest.fixture
def lost_run(tmp_path, python_path):
    """A run of chief-0, worker-0, worker-1 (min_workers 1) whose worker-1's host is gone."""
    store = RunStore(tmp_path / "runs")

    def make(**restart) -> Run:
        tasks = [{"role": role, "host": host, "transport": "local", "tf_port": 3000 + i, "python": python_path,
                  "workdir": str(tmp_path / "w")} for i, (role, host) in enumerate(zip(("chief", "worker", "worker"), HOSTS))]
        state = RunState("shrink-run", time.time(), {"tasks": tasks, "min_workers": 1}, job_to_dict(job_from_dict(job(**restart))),
                         [TaskState(n, i, h, str(tmp_path / "w" / "run")) for i, (n, h) in
                          enumerate(zip(("chief-0", "worker-0", "worker-1"), HOSTS))], phase=Phase.RESTARTING)
        store.save(state)
        return Run(state, store, Pool())
    make.store = store
    yield make
    # `status` on a kept run that is restarting starts the keeper it lacks (detached.ensure_keeper):
    # end it, or it outlives the test trying to restart tasks that have no run folder.
    if store.path("shrink-run").exists():
        detached.end_keeper(store.path("shrink-run"))


def shrink(run: Run, host: str) -> tuple[Run, str]:
    """What the keeper does with a lost host and no spare: plan, say why, record it."""
    lost = {host: "unreachable for 120 s"}
    found = membership.replace_lost(run, lost)
    assert found.dropped and not found.missing, found
    return membership.apply(run, found), membership.reason(run, lost, found)


def env_and_argv(run: Run, task: int) -> tuple[dict, list[str]]:
    return (task_env(run.cluster, task, run.job, "RUN", run.run_id, 2, run.state.tasks[task].name),
            task_argv(run.job, run.cluster.tasks[task], "RUN", run.run_id, 2, 40))


def test_keep_replica_batch_shrinks_the_batch_and_scales_the_learning_rate(lost_run, capsys):
    run, reason = shrink(lost_run(shrink="keep_replica_batch"), "127.0.0.9")
    assert reason.endswith("no spare left: runs on 2 task(s) without worker-1 (min_workers 1); per-replica "
                           "batch 10 kept: global batch 30 -> 20, learning rate x0.6667 (2 of 3 replicas; "
                           "restart.shrink keep_replica_batch)"), reason
    # Each task of the shrunk attempt: the harness gets the batch as its parameter, the scale in its env.
    for task in (0, 1):
        env, argv = env_and_argv(run, task)
        assert env["TFCONSOLE_SHRINK"] == "keep_replica_batch" and float(env["TFCONSOLE_LR_SCALE"]) == pytest.approx(2 / 3)
        assert env["TFCONSOLE_GLOBAL_BATCH_SIZE"] == "20" and env["TFCONSOLE_LAUNCH_REPLICAS"] == "3"
        assert "global_batch_size=20" in argv and "global_batch_size=30" not in argv
    assert cli.main(["--runs", str(lost_run.store.root), "status", run.run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["shrink"]
    assert shown == {"mode": "keep_replica_batch", "launch_replicas": 3, "replicas": 2,
                     "lr_scale": pytest.approx(2 / 3), "global_batch_size": 20}
    assert cli.main(["--runs", str(lost_run.store.root), "status", run.run_id]) == 0
    assert ("  shrunk: 3 -> 2 replicas, keep_replica_batch, global batch 20, learning rate x0.6667"
            in capsys.readouterr().out.splitlines())


def test_by_default_the_global_batch_stays_and_the_learning_rate_too(lost_run, capsys):
    run, reason = shrink(lost_run(), "127.0.0.9")
    assert reason.endswith("(min_workers 1); global batch 30 kept (15 per task)"), reason
    env, argv = env_and_argv(run, 1)
    assert env["TFCONSOLE_SHRINK"] == "keep_global_batch" and env["TFCONSOLE_LR_SCALE"] == "1.0"
    assert "global_batch_size=30" in argv
    assert cli.main(["--runs", str(lost_run.store.root), "status", run.run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shrink"]["mode"] == "keep_global_batch"


def test_a_second_shrink_counts_from_the_launch(lost_run):
    run, _ = shrink(lost_run(shrink="keep_replica_batch"), "127.0.0.9")
    again, reason = shrink(run, "127.0.0.8")
    assert "per-replica batch 10 kept: global batch 20 -> 10, learning rate x0.3333 (1 of 3 replicas" in reason, reason
    env, argv = env_and_argv(again, 0)
    assert float(env["TFCONSOLE_LR_SCALE"]) == pytest.approx(1 / 3) and "global_batch_size=10" in argv
