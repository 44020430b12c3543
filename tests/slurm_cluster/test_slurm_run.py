"""Runs on a real one-node Slurm cluster (rig/slurm.py): submitted, watched and stopped through
the command line and the Python API, as an operator on the login node would."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from backend.engines.slurm import SlurmEngine
from backend.runs.launcher import attach
from backend.runs.store import RunStore
from tests.conftest import chief_metrics as metrics, cli, processes_of, ps, slurm_file, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def job_file(folder: Path, **params) -> Path:
    job = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
           "params": {"epochs": 1, "steps_per_epoch": 30, "log_every": 5, "checkpoint_every": 10, **params}}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_two_task_job_through_the_cli_runs_to_its_last_step(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    out = cli("launch", str(slurm_file(tmp_path, python_path)), str(job_file(tmp_path)),
              "--wait", "300", runs=runs)
    run_id = out.stdout.splitlines()[0]
    assert out.stdout.splitlines()[-1] == f"run {run_id}: finished", out.stdout
    run = attach(run_id, store=RunStore(runs))
    rows = metrics(run)
    last = max(r["step"] for r in rows)
    assert last == 30, rows[-1]
    # Every worker's own loss at the last logged step: two tasks, each its own value.
    at_last = [r for r in rows if r["step"] == last]
    assert {r["task"] for r in at_last} >= {"chief-0", "worker-0"}, at_last
    status = cli("status", run_id, runs=runs).stdout
    assert "finished" in status and "exited(0)" in status, status
    assert not processes_of(run)


SLEEPER = """import json, os, time
print("sleeper", json.loads(os.environ["TF_CONFIG"])["task"], flush=True)
while True:
    time.sleep(1)
"""


def sleeper_job(folder: Path) -> Path:
    """A command job that holds its CPUs and never ends: Slurm's mechanics without TensorFlow."""
    script = folder / "sleeper.py"
    script.write_text(SLEEPER)
    path = folder / "sleeper-job.yaml"
    path.write_text(yaml.safe_dump({"kind": "command", "command": [str(script)]}))
    return path


def task_lines(status: str) -> list[str]:
    return [line for line in status.splitlines() if line.strip().startswith(("chief-", "worker-"))]


def test_a_job_pending_for_resources_shows_why_and_stop_leaves_no_process(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    cluster = slurm_file(tmp_path, python_path)
    training = cli("launch", str(cluster), str(job_file(tmp_path, steps_per_epoch=100000)), runs=runs).stdout.strip()
    first = attach(training, store=RunStore(runs))
    try:
        wait_for(lambda: {r["task"] for r in metrics(first)} >= {"chief-0", "worker-0"}, 300,
                 "both workers' losses")
        # The node's two CPUs are taken: a second job waits, and status says why in Slurm's words.
        waiting = cli("launch", str(cluster), str(sleeper_job(tmp_path)), runs=runs).stdout.strip()
        status = wait_for(lambda: (out := cli("status", waiting, runs=runs).stdout) and "Resources" in out and out,
                          60, "the second job pending for Resources")
        assert [line.split()[2] for line in task_lines(status)] == ["queued", "queued"], status
        assert "queued (Resources" in status, status
        assert "no process left" in cli("stop", waiting, runs=runs).stdout
        assert f"run {waiting}: stopped" in cli("status", waiting, runs=runs).stdout
    finally:
        stopped = cli("stop", training, runs=runs).stdout
    assert "no process left" in stopped
    assert processes_of(first) == []   # right after stop returned: scancel's check held
    assert slurm_cluster.node_state() == "idle"
    status = cli("status", training, runs=runs).stdout
    assert f"run {training}: stopped" in status, status


@pytest.mark.waits   # a sleeper job and Slurm's minute: nothing to take turns for
def test_a_job_over_its_time_limit_is_shown_as_timeout(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    # Slurm counts time limits in whole minutes and checks them about every 30 s.
    out = cli("launch", str(slurm_file(tmp_path, python_path, time_limit="1")), str(sleeper_job(tmp_path)),
              "--wait", "300", runs=runs, check=False)
    run_id = out.stdout.splitlines()[0]
    assert out.returncode == 1 and out.stdout.splitlines()[-1] == f"run {run_id}: failed", out
    status = cli("status", run_id, runs=runs).stdout
    assert "timeout" in status and "time limit" in status, status
    state = RunStore(runs).load(run_id)
    assert "timeout" in state.attempts[-1].reason
    assert processes_of(attach(run_id, store=RunStore(runs))) == []


def test_a_bad_partition_is_refused_with_slurms_own_message(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    out = cli("launch", str(slurm_file(tmp_path, python_path, partition="nope")), str(sleeper_job(tmp_path)),
              runs=runs, check=False)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "invalid partition specified: nope" in out.stderr, out.stderr
    assert "partition" in out.stderr.split("stderr:")[0]   # and our own next step names the field


def test_a_job_the_console_did_not_submit_is_attached_by_its_id(slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    marker = "sleep 600.0421"   # a command line no other process has
    out = slurm_cluster.run("sbatch", "--parsable", "-n", "1", f"--output={tmp_path}/job.out",
                            f"--wrap=echo started; {marker}")
    job_id = out.stdout.strip()
    run_id = cli("attach-slurm", str(slurm_file(tmp_path, python_path)), job_id, runs=runs).stdout.strip()
    assert run_id == f"slurm-{job_id}"
    status = wait_for(lambda: (s := cli("status", run_id, runs=runs).stdout) and "running" in s and s, 60,
                      "the attached job running")
    assert len(task_lines(status)) == 1, status
    assert "started" in wait_for(lambda: cli("logs", run_id, runs=runs).stdout, 30, "the job's output")
    assert "no process left" in cli("stop", run_id, runs=runs).stdout
    assert not [line for line in ps() if marker in line]
    assert "JobState=CANCELLED" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    refused = cli("attach-slurm", str(slurm_file(tmp_path, python_path)), "999999", runs=runs, check=False)
    assert refused.returncode != 0 and "does not know job 999999" in refused.stderr


def test_a_queued_job_shows_the_run_queued_with_slurms_reason_and_place_and_stop_cancels_it_at_once(
        slurm_cluster, tmp_path, python_path):
    runs = tmp_path / "runs"
    cluster = slurm_file(tmp_path, python_path)
    holder = cli("launch", str(cluster), str(sleeper_job(tmp_path)), runs=runs).stdout.strip()
    try:
        wait_for(lambda: "running" in cli("status", holder, runs=runs).stdout.splitlines()[1], 60,
                 "the first job holding the node's two CPUs")
        first = cli("launch", str(cluster), str(sleeper_job(tmp_path)), runs=runs).stdout.strip()
        second = cli("launch", str(cluster), str(sleeper_job(tmp_path)), runs=runs).stdout.strip()
        # The CLI: the run is queued, with Slurm's reason and its place among the waiting jobs.
        status = wait_for(lambda: (out := cli("status", first, runs=runs).stdout) and "Resources" in out and out,
                          60, "the second job queued for Resources")
        assert status.splitlines()[0] == f"run {first}: queued (Resources, 1st of 2 waiting), attempt 1", status
        assert [line.split()[2] for line in task_lines(status)] == ["queued", "queued"], status
        # status --json and the stored record agree: queued, with Slurm's reason and place.
        shown = json.loads(cli("status", first, "--json", runs=runs).stdout)
        assert (shown["phase"], shown["queue"]) == ("queued", "Resources, 1st of 2 waiting"), shown
        listed = {r["run_id"]: r["phase"] for r in json.loads(cli("runs", "--json", runs=runs).stdout)}
        assert listed[first] == "queued" and listed[holder] == "running", listed
        # The Python API says the same: the state a script reads, and the shown phase.
        run = attach(second, store=RunStore(runs))
        statuses = run.status()
        assert [s.state for s in statuses] == ["queued", "queued"], statuses
        assert run.state.phase == "queued" and run.state.live, run.state
        assert run.shown_phase(statuses).startswith("queued (") and "2nd of 2 waiting" in run.shown_phase(statuses)
        # Stop cancels a queued job at once: nothing to wait for.
        started = time.time()
        assert "no process left" in cli("stop", second, runs=runs).stdout
        assert time.time() - started < 10
        assert f"run {second}: stopped" in cli("status", second, runs=runs).stdout
        assert "CANCELLED" in slurm_cluster.run("scontrol", "show", "job", SlurmEngine.jobs(run)["1"]).stdout
        # Once Slurm starts the queued job (the holder gone), every reader says running.
        cli("stop", holder, runs=runs)
        shown = wait_for(lambda: (out := json.loads(cli("status", first, "--json", runs=runs).stdout))
                         and out["phase"] == "running" and out, 60, "the queued job started")
        assert shown["queue"] is None and [t["state"] for t in shown["tasks"]] != ["queued", "queued"], shown
        run = attach(first, store=RunStore(runs))
        assert run.state.phase == "running", run.state
        assert cli("status", first, runs=runs).stdout.splitlines()[0] == f"run {first}: running, attempt 1"
        cli("stop", first, runs=runs)
    finally:
        cli("stop", holder, runs=runs)
