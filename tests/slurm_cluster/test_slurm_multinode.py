"""Runs across two Slurm nodes (rig/slurm_nodes.py: each node its own network namespace and
address, the filesystem shared): two tasks per node, ranks on different nodes dialling each other
by name, through the CLI, the Python API and Monitor's metrics store, as an operator would.

Kept small for a 2-core machine shared with other tests: four workers of a 16-32-32-1 MLP,
one thread each, a few dozen steps.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from backend import checkpoints
from backend.engines.slurm import SlurmEngine
from backend.runs import launcher, restore
from backend.runs.launcher import attach
from backend.runs.store import RunStore
from backend.watch.metrics import MetricsStore
from tests.conftest import chief_metrics as metrics, cli, processes_of, slurm_file, wait_for
from tests.faults.conftest import TF_ENV, kill_task, wait_phase

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
TASKS = ["chief-0", "worker-0", "worker-1", "worker-2"]   # ranks 0, 1 on node1; 2, 3 on node2
ON_NODE = {"chief-0": "node1", "worker-0": "node1", "worker-1": "node2", "worker-2": "node2"}


def cluster_file(folder: Path, python: str, **fields) -> Path:
    """Two nodes, two tasks each; the console runs on the login host (the root namespace)."""
    return slurm_file(folder, python, nodes=2, cpus_per_task=1, **fields)


def job_file(folder: Path, *, restart: dict | None = None, **params) -> Path:
    job = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"), "env": TF_ENV,
           "params": {"epochs": 1, "steps_per_epoch": 40, "log_every": 5, "checkpoint_every": 10,
                      "global_batch_size": 32, "collective_timeout_s": 30, **params}}
    if restart:
        job["restart"] = restart
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def task_lines(status: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in status.splitlines()
            if line.strip().startswith(("chief-", "worker-"))}


def test_two_nodes_two_tasks_each_train_to_the_last_step_with_every_loss_on_monitor(slurm_nodes, tmp_path,
                                                                                   python_path):
    runs = tmp_path / "runs"
    run_id = cli("launch", str(cluster_file(tmp_path, python_path)), str(job_file(tmp_path)),
                 runs=runs).stdout.splitlines()[0]
    run = attach(run_id, store=RunStore(runs))
    store = MetricsStore()
    monitor = run.monitor(store).start()
    try:
        run.wait(timeout=240)   # no restart policy, so no keeper: the waiter settles the run
        assert run.state.phase == "finished", (run.state, cli("status", run_id, runs=runs).stdout)
        # Monitor's store holds every worker's loss, up to the last step.
        wait_for(lambda: sorted(store.tasks()) == TASKS and all(store.series(t).step[-1] == 40 for t in TASKS),
                 60, f"every worker's loss at step 40 on Monitor: {store.tasks()}")
    finally:
        monitor.stop()
    for task in TASKS:
        assert len(store.series(task)) >= 8, (task, store.series(task))
    status = cli("status", run_id, runs=runs).stdout
    lines = task_lines(status)
    assert sorted(lines) == TASKS, status
    for task, node in ON_NODE.items():   # each task on its node, as Slurm placed it
        assert node in lines[task] and "exited(0)" in lines[task], status
    # Per-node logs: each rank's own log, written on its node, read on the login host.
    for task, node in ON_NODE.items():
        log = cli("logs", run_id, "--task", task, runs=runs).stdout
        assert f"=== {task} on {node} TF_CONFIG=" in log, log[:600]
    tf_config = json.loads(Path(run.state.chief.remote_run_dir, "tasks", "worker-2.json").read_text())["tf_config"]
    assert [a.split(":")[0] for a in tf_config["cluster"]["worker"]] == ["node1", "node2", "node2"], tf_config
    assert not processes_of(run)


def test_a_rank_on_the_second_node_killed_with_sigkill_resumes_from_a_checkpoint(slurm_nodes, tmp_path,
                                                                                 python_path):
    runs = tmp_path / "runs"
    restart = {"mode": "on_failure", "max_restarts": 2, "backoff_s": 1.0, "stall_timeout_s": 120.0}
    run_id = cli("launch", str(cluster_file(tmp_path, python_path)),
                 str(job_file(tmp_path, restart=restart, steps_per_epoch=60, pace_s=0.05)),
                 runs=runs).stdout.splitlines()[0]
    store = RunStore(runs)
    run = attach(run_id, store=store)
    wait_for(lambda: any(r["step"] > 10 for r in metrics(run)), 180, "training past the first checkpoint")
    info = json.loads(Path(run.state.chief.remote_run_dir, "tasks", "worker-2.json").read_text())
    assert info["node"] == "node2", info
    kill_task(run, "worker-2")
    state = wait_phase(store, run_id, ("finished", "failed", "stopped"), 240)
    assert state.phase == "finished", (state, run.log_tail("worker-2"))
    first, second = state.attempts
    assert "worker-2" in first.reason, first   # the killed rank, not its casualties
    assert second.resume_step and second.resume_step >= 10, second
    assert second.last_step == 60
    rows = metrics(run)
    assert {r["task"] for r in rows if r["attempt"] == second.number} == set(TASKS)
    assert min(r["step"] for r in rows if r["attempt"] == second.number) > second.resume_step
    jobs = SlurmEngine.jobs(run)
    assert sorted(jobs) == ["1", "2"] and jobs["1"] != jobs["2"], jobs
    wait_for(lambda: processes_of(run) == [], 30, "no process of the run")


def test_save_now_export_and_restore_on_a_live_two_node_run(slurm_nodes, tmp_path, python_path):
    runs = tmp_path / "runs"
    run_id = cli("launch", str(cluster_file(tmp_path, python_path)),
                 str(job_file(tmp_path, steps_per_epoch=400, checkpoint_every=0, pace_s=0.05)),
                 runs=runs).stdout.splitlines()[0]
    run = attach(run_id, store=RunStore(runs))
    try:
        wait_for(lambda: any(r["step"] >= 5 for r in metrics(run)), 180, "the first losses")
        saved = checkpoints.save_now(run, wait_s=120)
        # Every rank saved the step, on its own node, into the shared run folder.
        for task in TASKS:
            assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, task)], task
        result = checkpoints.export(run, step=saved, name="two-nodes")
        assert result["match"] is True and result["step"] == saved, result
        wait_for(lambda: max(r["step"] for r in metrics(run)) > saved + 10, 120, "training past the save")
        outcome = restore.restore(run, saved)
        run = attach(run_id, store=RunStore(runs))
        assert run.state.attempt == 2 and run.state.attempts[-1].resume_step == saved, (outcome, run.state)
        wait_for(lambda: {r["task"] for r in metrics(run) if r["attempt"] == 2} == set(TASKS), 180,
                 "every rank training again after the restore")
        resumed = [r for r in metrics(run) if r["attempt"] == 2]
        assert min(r["step"] for r in resumed) == saved + 1, resumed[:4]
        jobs = SlurmEngine.jobs(run)
        assert sorted(jobs) == ["1", "2"] and jobs["1"] != jobs["2"], jobs
    finally:
        stopped = cli("stop", run_id, runs=runs).stdout
    assert "no process left" in stopped, stopped
    assert processes_of(run) == []
    assert slurm_nodes.node_state() == "idle"


# No GPU here: each node gets its own FAKE nvidia-smi, answering different numbers as the real one
# answers ``--query-gpu=... --format=csv,noheader,nounits``, so the test sees which node each
# reading came from. The fake is bind-mounted, inside each node's own mount namespace, onto one
# folder of the shared filesystem that is first on PATH (srun carries the login host's PATH to
# the step); on the login host that folder stays empty: no readings from there.
FAKE_GPUS = {"node1": "0, 11, 1000, 16000\n", "node2": "0, 77, 7000, 16000\n1, 5, 500, 16000\n"}


@pytest.fixture
def fake_node_gpus(slurm_nodes, tmp_path, monkeypatch):
    shared_bin = tmp_path / "gpu-bin"
    shared_bin.mkdir()
    for node, proc in zip(slurm_nodes.nodes, slurm_nodes.procs[1:]):   # procs: slurmctld, one slurmd a node
        own = tmp_path / f"gpus-{node}"
        own.mkdir()
        fake = own / "nvidia-smi"
        fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + FAKE_GPUS[node] + "EOF\n")
        fake.chmod(0o755)
        subprocess.run(["nsenter", "-t", str(proc.pid), "--mount", "--", "mount", "--bind", str(own), str(shared_bin)],
                       check=True, capture_output=True, timeout=30)
    monkeypatch.setenv("PATH", f"{shared_bin}:{os.environ['PATH']}")
    yield FAKE_GPUS


def test_monitor_reads_the_gpus_of_every_node_of_a_two_node_job(slurm_nodes, fake_node_gpus, tmp_path, python_path):
    from backend.config.kinds import load_any_cluster
    from backend.config.spec import job_from_dict
    from console import monitor_view
    job = job_from_dict({"kind": "command", "command": [python_path, "-c", "import time; time.sleep(120)"]})
    store = RunStore(tmp_path / "runs")
    run = launcher.launch(load_any_cluster(cluster_file(tmp_path, python_path)), job, store=store,
                          preflight=launcher.Preflight.SKIP)
    mon = run.monitor(MetricsStore()).start()
    try:
        samples = wait_for(lambda: (lambda s: sorted(s) == ["node1", "node2"] and s)(mon.gpu()), 120,
                           f"GPU readings from both nodes (have {sorted(mon.gpu())})")
        # What Monitor's GPU panel shows: per node, each GPU's latest utilisation and memory.
        assert monitor_view.gpu_rows(samples) == [
            {"host": "node1", "GPU": 0, "utilisation %": 11.0, "memory used MiB": 1000.0,
             "memory total MiB": 16000.0},
            {"host": "node2", "GPU": 0, "utilisation %": 77.0, "memory used MiB": 7000.0,
             "memory total MiB": 16000.0},
            {"host": "node2", "GPU": 1, "utilisation %": 5.0, "memory used MiB": 500.0,
             "memory total MiB": 16000.0}]
    finally:
        mon.stop()
        run.stop()
    assert slurm_nodes.node_state() == "idle"
