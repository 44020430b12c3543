"""One owner of run state: concurrent writers, runs nobody watches, a killed keeper, reused ids,
a stop that cannot reach a host. Real processes, real sshd; command jobs where TensorFlow would
only add minutes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml

from backend.runs import detached
from backend.runs import launcher
from backend.errors import MultiHostError
from backend.runs.store import RunStore
from backend.records.state import Attempt, Phase, RunState
from backend.config.spec import cluster_from_dict, cluster_to_dict
from rig import sshd
from tests.conftest import ROOT, processes_of, ssh_task, wait_for
from tests.faults.conftest import assert_nothing_left, command_job

WRITER = """
import sys
from backend.runs.store import RunStore
store, tag = RunStore(sys.argv[1]), sys.argv[2]
for i in range(int(sys.argv[3])):
    store.update("shared", lambda s: s.unreachable.append(f"{tag}{i}"))
"""


def test_two_processes_writing_one_run_lose_nothing_and_a_reader_never_sees_damage(tmp_path):
    store = RunStore(tmp_path / "runs")
    store.reserve("shared")
    store.save(RunState("shared", 0.0, {"tasks": []}, {"kind": "command", "command": ["x"]}, []))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(store.root), tag, "400"], env=env,
                                stderr=subprocess.PIPE) for tag in ("a", "b")]
    loads = 0
    while any(w.poll() is None for w in writers):
        store.load("shared")          # raises RunError on a damaged or missing file
        loads += 1
    assert [w.wait() for w in writers] == [0, 0], [w.stderr.read() for w in writers]
    seen = store.load("shared").unreachable
    assert sorted(seen) == sorted([f"a{i}" for i in range(400)] + [f"b{i}" for i in range(400)])
    assert loads > 0
    assert oct((store.path("shared") / "state.json").stat().st_mode & 0o777) == "0o600"  # holds env
    assert not list(store.path("shared").glob("*.tmp"))


def test_a_phase_moves_only_from_the_phase_its_writer_expects(tmp_path):
    """RunStore.move, the one phase writer: a compare-and-set under the run's lock. A Stop that
    landed first keeps the run stopping; the keeper's later 'attempt failed' changes nothing."""
    store = RunStore(tmp_path / "runs")
    store.reserve("r")
    store.save(RunState("r", 0.0, {"tasks": []}, {"kind": "command", "command": ["x"]}, [],
                        [Attempt(1, 0.0)], Phase.RUNNING))
    state, moved = store.move("r", Phase.STOPPING, when=lambda s: s.live)
    assert moved and state.phase == Phase.STOPPING
    state, moved = store.move("r", Phase.RESTARTING, when=(Phase.RUNNING,), reason="worker-0 exited(1)")
    assert not moved and store.load("r").phase == Phase.STOPPING
    assert store.load("r").attempts[-1].reason is None
    state, moved = store.move("r", Phase.STOPPED, when=(Phase.STOPPING,), reason="stopped",
                              last_step=7, unreachable={"h2": 1, "h1": 1})
    assert moved and (state.phase, state.unreachable) == (Phase.STOPPED, ["h1", "h2"])
    assert (state.attempts[-1].reason, state.attempts[-1].last_step) == ("stopped", 7)
    state, _ = store.move("r", Phase.FAILED, when=(Phase.STOPPED,), reason="later")
    assert state.attempts[-1].reason == "stopped"   # an attempt closes once: the first reason stays


def _cli(*args, runs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_run_nobody_watches_is_settled_by_the_next_reader(local_cluster, tmp_path, python_path):
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster_to_dict(local_cluster)))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(
        {"kind": "command", "command": [python_path, "-c", "import time; time.sleep(4)"]}))
    runs = tmp_path / "runs"
    out = _cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "unwatched",
               runs=runs)
    assert out.returncode == 0, out.stderr
    store = RunStore(runs)
    assert store.load("unwatched").phase == Phase.RUNNING
    run = launcher.attach("unwatched", store=store)
    wait_for(lambda: all(s.state == "exited" for s in run.status()), 60, "both tasks to exit")
    assert store.load("unwatched").phase == Phase.RUNNING        # nobody has looked yet
    status = _cli("status", "unwatched", runs=runs)
    assert "run unwatched: finished" in status.stdout, status.stdout + status.stderr
    assert "finished" in _cli("runs", runs=runs).stdout
    assert store.load("unwatched").phase == Phase.FINISHED       # recorded, for every later reader


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_keeper_killed_with_sigkill_is_restarted_by_status(local_cluster, tmp_path, python_path):
    store = RunStore(tmp_path / "runs")
    job = command_job("import time; time.sleep(12)", python_path, max_restarts=1)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    first = wait_for(lambda: detached.keeper_pid(run.local_dir), 20, "the keeper")
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: detached.keeper_pid(run.local_dir) is None, 20, "the keeper to die")
    out = _cli("status", run.run_id, runs=store.root)
    assert "keeper not running: started a new one" in out.stdout, out.stdout + out.stderr
    second = detached.keeper_pid(run.local_dir)
    assert second and second != first
    state = wait_for(lambda: (s := store.load(run.run_id)) and not s.live and s, 90, "the run to end")
    assert state.phase == Phase.FINISHED and len(state.attempts) == 1, state
    assert_nothing_left(run, store)


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_reused_run_id_never_meets_the_old_runs_files(local_cluster, tmp_path, python_path):
    job = command_job("print('hello')", python_path)
    job = job.__class__(**{**job.__dict__, "restart": job.restart.__class__()})   # restart: never
    old = launcher.launch(local_cluster, job, store=RunStore(tmp_path / "a"), run_id="same",
                          preflight=launcher.Preflight.SKIP)
    old.wait(timeout=60)
    new = launcher.launch(local_cluster, job, store=RunStore(tmp_path / "b"), run_id="same",   # `make clean`
                          preflight=launcher.Preflight.SKIP)
    new.wait(timeout=60)
    old_dirs = {t.remote_run_dir for t in old.state.tasks}
    new_dirs = {t.remote_run_dir for t in new.state.tasks}
    assert old_dirs.isdisjoint(new_dirs)
    assert all(os.path.isdir(d) for d in old_dirs)             # the old run's files are kept
    assert new.state.phase == Phase.FINISHED and len(new.state.attempts) == 1
    log = new.log_tail(new.state.tasks[0].name)
    assert log.count("=== tfconsole attempt") == 1, log        # one run, one attempt in this log


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_stop_that_cannot_reach_a_host_leaves_the_run_stopping_until_it_can(
        client_key, python_path, tmp_path):
    """A worker host's sshd goes away: stop names it, the run stays `stopping` (Stop stays offered)
    and keeps every process record; with sshd back, stop again ends it with nothing left."""
    host = sshd.make_host(tmp_path / "sshd", "127.0.0.5", client_key.parent / "authorized_keys")
    try:
        known = tmp_path / "known_hosts"
        known.write_text(sshd.known_hosts_line(host))
        from backend.hosts.ssh import SSHOptions
        options = SSHOptions(known_hosts=str(known), ssh_config=str(tmp_path / "none"),
                             allow_agent=False, look_for_keys=False, connect_timeout=3)
        cluster = cluster_from_dict({"tasks": [
            {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
             "python": python_path, "workdir": str(tmp_path / "local")},
            ssh_task(host, "worker", sshd.free_port(), client_key, python_path, tmp_path / "h5")]})
        store = RunStore(tmp_path / "runs")
        job = command_job("import time; time.sleep(600)", python_path)
        job = job.__class__(**{**job.__dict__, "restart": job.restart.__class__()})
        run = launcher.launch(cluster, job, store=store, options=options, preflight=launcher.Preflight.SKIP)
        host.kill_all()                                          # every sshd process of that host
        with pytest.raises(MultiHostError, match="127.0.0.5"):
            run.stop(grace_s=2)
        state = store.load(run.run_id)
        assert state.phase == Phase.STOPPING and state.live and state.unreachable == ["127.0.0.5"], state
        assert any(t.pgid for t in state.tasks if t.host == "127.0.0.5")   # the record is kept
        assert processes_of(run), "the unreachable host's task should still run"
        host.start(client_key.parent / "authorized_keys")
        launcher.attach(run.run_id, store=store, options=options).stop(grace_s=2)
        assert store.load(run.run_id).phase == Phase.STOPPED
        wait_for(lambda: not processes_of(run), 30, "no process of the run")
    finally:
        host.stop()


@pytest.mark.slow
def test_a_saved_run_reloads_without_the_users_job_file(local_cluster, tmp_path):
    """The job module is copied into the run once: moving or editing the original afterwards
    changes neither status/stop nor what a restart ships."""
    import shutil
    from tests.faults.conftest import SYNTHETIC, harness_job
    module = tmp_path / "my_job.py"
    shutil.copyfile(SYNTHETIC, module)
    store = RunStore(tmp_path / "runs")
    job = harness_job(str(module), steps_per_epoch=5000)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    try:
        module.unlink()                                          # the operator moves it away
        again = launcher.attach(run.run_id, store=store)
        assert [s.state for s in again.status()] == ["running", "running"]
        kept = again.job.module
        assert kept.startswith(str(store.path(run.run_id))) and open(kept).read() == open(SYNTHETIC).read()
    finally:
        launcher.attach(run.run_id, store=store).stop(grace_s=3)
    assert store.load(run.run_id).phase == Phase.STOPPED


ABORT_ONE = ("import os, time\n"
             "time.sleep(8)\n"   # well past launch's 3 s start check, even on a loaded host
             "if os.environ['TFCONSOLE_TASK'] == 'worker-1':\n"
             "    os.abort()          # what 'terminate called ... Resource temporarily unavailable' does\n"
             "time.sleep(600)\n")


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_worker_that_aborts_ends_the_run_failed_and_its_peer_is_stopped(local_cluster, tmp_path, python_path):
    """A worker killed by SIGABRT (exit -6) while its peer still runs: the next reader records
    `failed` naming it, and stops the peer (it could only hang on its next collective)."""
    store = RunStore(tmp_path / "runs")
    job = command_job(ABORT_ONE, python_path)
    job = job.__class__(**{**job.__dict__, "restart": job.restart.__class__()})   # restart: never
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    wait_for(lambda: any(s.label == "exited(-6)" for s in run.status()), 60, "worker-1 to abort")
    out = _cli("status", run.run_id, runs=store.root)
    assert f"run {run.run_id}: failed" in out.stdout, out.stdout + out.stderr
    state = store.load(run.run_id)
    assert state.phase == Phase.FAILED and state.attempts[-1].reason.startswith("worker-1 exited(-6)"), state
    assert_nothing_left(run, store)


def test_a_keeper_is_found_the_moment_it_has_started(tmp_path):
    """Popen returns while the new program's arguments are not yet in /proc/PID/cmdline (180 of
    200 reads right after Popen were empty on a busy machine): a reader must not then take the
    keeper for dead, or `status` would start a second one. Read here right after Popen, where
    the gap is widest (keeper_pid itself reads after the pid file is written)."""
    local_dir = tmp_path / "run-1"
    local_dir.mkdir()
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 2)]
    try:   # a busy machine, as in CI: one spinning process per core
        for _ in range(20):
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)", "keep", local_dir.name],
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                assert b"keep" in detached._cmdline(proc.pid)
                (local_dir / detached.KEEPER_PID).write_text(f"{proc.pid}\n")
                assert detached.keeper_pid(local_dir) == proc.pid
            finally:
                proc.kill()
                proc.wait()
    finally:
        for spinner in busy:
            spinner.kill()
            spinner.wait()
    assert detached.keeper_pid(local_dir) is None   # and a dead one is not found
