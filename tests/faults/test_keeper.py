"""The keeper's rules, with plain command jobs (no TensorFlow): quick and exact."""
from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from backend.runs import detached, keeper
from backend.runs import launcher, restore
from tests.faults.conftest import assert_nothing_left, command_job, wait_phase
from tests.conftest import wait_for

HANG = "import time; time.sleep(600)"


def fail_when(flag) -> str:
    """A command that exits 3 once ``flag`` exists: the test creates it after launch has returned,
    so the failure always comes after launch's start check, however slow the machine."""
    return f"import os, sys, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.05)\nsys.exit(3)"


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_user_stop_wins_over_a_pending_restart(local_cluster, store, python_path, tmp_path):
    flag = tmp_path / "fail-now"
    job = command_job(fail_when(flag), python_path, max_restarts=3, backoff_s=8)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    assert detached.keeper_pid(run.local_dir), "launch started no keeper"
    assert store.load(run.run_id).phase == "running"         # both tasks passed the start check
    flag.touch()
    wait_phase(store, run.run_id, ("restarting",), 60)      # the keeper is in its backoff
    launcher.attach(run.run_id, store=store).stop(grace_s=2)
    assert_nothing_left(run, store)
    state = store.load(run.run_id)
    assert state.phase == "stopped" and len(state.attempts) == 1, state
    assert "exited(3)" in state.attempts[0].reason
    # The keeper leaves at its next poll, which may come after stop returns (a loaded full run
    # read the log first); the stop may still be under way then ("stopping").
    log = run.local_dir / detached.KEEPER_LOG
    wait_for(lambda: re.search(r"is (stopping|stopped); keeper exits", log.read_text()), 30,
             "the keeper to log that it leaves the stopped run")


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_keeper_killed_with_term_says_why_it_leaves(local_cluster, store, python_path, tmp_path):
    """An operator's ``kill`` (or a Stop's end_keeper on a keeper too slow to leave) in a long
    back-off: the keeper's log says it was ended, and in what phase it left the run."""
    flag = tmp_path / "fail-now"
    job = command_job(fail_when(flag), python_path, max_restarts=3, backoff_s=120)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    pid = detached.keeper_pid(run.local_dir)
    flag.touch()
    wait_phase(store, run.run_id, ("restarting",), 60)
    os.kill(pid, signal.SIGTERM)
    log = run.local_dir / detached.KEEPER_LOG
    wait_for(lambda: "is restarting; keeper exits (ended by TERM)" in log.read_text(), 30,
             "the keeper to log why it left")
    wait_for(lambda: detached.keeper_pid(run.local_dir) is None, 30, "the keeper to exit")
    launcher.attach(run.run_id, store=store).stop(grace_s=2)
    assert_nothing_left(run, store)


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_stalled_run_is_restarted_then_failed(local_cluster, store, python_path):
    job = command_job(HANG, python_path, max_restarts=1, backoff_s=0.2, stall_timeout_s=3)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    # Two attempts, each a 3 s stall, its stacks saved, its tasks stopped (TERM, then KILL): about
    # 25 s here; 120 s bounds it on a machine as loaded as a full suite beside other work.
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 120)
    assert state.phase == "failed"
    assert [a.reason.split(":")[0] for a in state.attempts] == ["stalled", "stalled"]
    assert [a.resume_step for a in state.attempts] == [None, None]   # no checkpoint: from scratch
    assert_nothing_left(run, store)


def cause_after_casualty(flag) -> str:
    """Once ``flag`` exists task 1 dies as a casualty does (its collective aborted) and task 0,
    the cause, exits 7 six seconds later: the order a keeper may see a kill -9 over SSH in."""
    return ("import json, os, sys, time\n"
            f"while not os.path.exists({str(flag)!r}): time.sleep(0.05)\n"
            "if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 1:\n"
            "    sys.exit('tensorflow.python.framework.errors_impl.UnavailableError: "
            "Collective ops is aborted by: peer down')\n"
            "time.sleep(6)\nsys.exit(7)")   # 6 s: a keeper poll late on a loaded host still sees task 1 first


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_the_attempt_names_the_cause_even_when_a_casualty_shows_first(local_cluster, store,
                                                                       python_path, tmp_path):
    flag = tmp_path / "fail-now"
    job = command_job(cause_after_casualty(flag), python_path, max_restarts=0)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    # Only once the keeper watches: a keeper started late on a loaded machine would first look
    # after both tasks ended, and see the cause at once (no casualty first: nothing to test).
    log = run.local_dir / detached.KEEPER_LOG
    wait_for(lambda: log.exists() and "keeping run" in log.read_text(), 60, "the keeper to start")
    flag.touch()
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 60)
    assert state.phase == "failed" and state.attempts[0].reason.startswith("worker-0 exited(7)"), state
    assert "lost its collective" in (run.local_dir / detached.KEEPER_LOG).read_text()
    assert_nothing_left(run, store)


def test_a_second_keeper_is_refused(local_cluster, store, python_path, tmp_path):
    import fcntl
    from backend.errors import RunError
    from backend.records.state import RunState
    store.save(RunState("r1", 0.0, {"tasks": []}, {"kind": "command", "command": ["x"]}, []))
    with open(store.path("r1") / detached.KEEPER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(RunError, match="already has a keeper"):
            keeper.Keeper("r1", store=store).run()


def test_conclude_names_the_first_failure_not_the_casualty():
    from backend.diagnosis import diagnose
    from backend.records.outcome import TaskStatus, Verdict, conclude
    found = conclude([TaskStatus("chief-0", "h", "exited", 1, diagnose.PEER_DIED),
                      TaskStatus("worker-0", "h", "exited", -9)])
    assert (found.verdict, found.reason, found.all_ended) == (Verdict.FAILED, "worker-0 exited(-9)", True)
    assert conclude([TaskStatus("chief-0", "h", "exited", 0),
                     TaskStatus("worker-0", "h", "running")]).verdict == Verdict.GOING
    assert conclude([TaskStatus("worker-0", "h", "lost")]).reason == "worker-0 lost"
    fit = conclude([TaskStatus("chief-0", "h", "exited", 1, "The worker stopped with an error: X"),
                    TaskStatus("worker-0", "h", "exited", 1, diagnose.KERAS_FIT)])
    assert fit.reason.startswith("worker-0 exited(1)") and diagnose.permanent(fit.reason)
    assert conclude([TaskStatus("chief-0", "h", "exited", 0),
                     TaskStatus("worker-0", "h", "exited", 0)]).verdict == Verdict.FINISHED
    early = conclude([TaskStatus("chief-0", "h", "running"),
                      TaskStatus("worker-0", "h", "exited", 1, diagnose.PEER_DIED)])
    assert early.verdict == Verdict.FAILED and early.casualties_only   # the cause may show next
    assert not found.casualties_only and not fit.casualties_only


def test_an_unreachable_host_is_unknown_not_failed_unless_another_task_failed():
    from backend.records.outcome import TaskStatus, Verdict, conclude
    found = conclude([TaskStatus("chief-0", "h2", "running"), TaskStatus("worker-0", "h3", "unreachable")])
    assert found.verdict == Verdict.UNKNOWN and found.unreachable == ("worker-0",)
    assert "worker-0 (h3)" in found.reason
    found = conclude([TaskStatus("chief-0", "h2", "exited", -6), TaskStatus("worker-0", "h3", "unreachable")])
    assert found.verdict == Verdict.FAILED and not found.all_ended   # exit -6 (abort) is a failure


@pytest.mark.slow
def test_a_restored_run_is_kept_again(local_cluster, store):
    from backend import checkpoints
    from tests.conftest import wait_for
    from tests.faults.conftest import harness_job
    # Paced (20 ms a step): the restored attempt still trains when restore returns, however
    # long that took on a loaded machine (a full-speed one had finished and its keeper gone).
    run = launcher.launch(local_cluster, harness_job(steps_per_epoch=600, pace_s=0.02), store=store,
                          preflight=launcher.Preflight.SKIP)
    first = wait_for(lambda: checkpoints.list_checkpoints(run), 120, "a first checkpoint")[0]["step"]
    old_keeper = detached.keeper_pid(run.local_dir)
    restore.restore(run, first)
    new_keeper = wait_for(lambda: detached.keeper_pid(run.local_dir), 60, "a keeper for the restored run")
    assert new_keeper != old_keeper
    state = wait_phase(store, run.run_id, ("failed", "finished", "stopped"), 240)
    assert state.phase == "finished" and state.attempts[-1].resume_step == first, state
    assert f"keeping run {run.run_id} (pid {new_keeper})" in (run.local_dir / detached.KEEPER_LOG).read_text()
    assert_nothing_left(run, store)


def _waits_for_flock(pid: int) -> bool:
    """Whether process ``pid`` is blocked waiting for a flock (a "->" line in /proc/locks)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())


def test_a_keeper_started_by_a_restore_waits_for_the_old_one_then_keeps_the_run(local_cluster, store):
    """Under load the old keeper can miss the restore's stop and go on keeping the new attempt.
    The keeper restore starts must then wait for it, not exit with "already has a keeper" while
    keeper.pid names it and the run goes unkept (seen in a three-process test run)."""
    import contextlib
    import fcntl
    import os
    import signal
    from backend.hosts.ssh import SSHOptions
    from backend.runs.detached import KEEPER_LOCK, KEEPER_PID, start_keeper
    from backend.records.state import Phase, RunState
    from backend.config.spec import cluster_to_dict
    from tests.conftest import wait_for
    store.reserve("restored")
    store.save(RunState("restored", 0.0, cluster_to_dict(local_cluster), {"kind": "command", "command": ["x"]},
                        [], phase=Phase.FINISHED))
    folder = store.path("restored")
    with open(folder / KEEPER_LOCK, "a") as old_keeper:   # the keeper from before the restore
        fcntl.flock(old_keeper, fcntl.LOCK_EX)
        pid = start_keeper("restored", store.root, SSHOptions(), take_over=True)
        try:
            wait_for(lambda: _waits_for_flock(pid), 60, "the new keeper waiting for the old one's lock")
            assert detached.keeper_pid(folder) == pid   # a status read meanwhile finds a keeper
        except BaseException:
            with contextlib.suppress(ProcessLookupError):   # nothing left behind, even on failure
                os.kill(pid, signal.SIGKILL)
            raise
    wait_for(lambda: detached.keeper_pid(folder) is None, 60, "the new keeper to keep the run and exit")
    # The lock goes before the process prints its last line ("run restored: finished", from
    # `keep` once the keeper returns): wait for that line, do not read the log once.
    log = wait_for(lambda: "run restored: finished" in (text := (folder / detached.KEEPER_LOG).read_text())
                   and text, 30, "the keeper's last line")
    assert f"keeping run restored (pid {pid})" in log, log
    assert "already has a keeper" not in log and "Traceback" not in log, log
    # keeper.pid names the keeper that kept the run last, and stays once it has exited (so a Stop
    # waits for the process itself); a reader passes over it: keeper_pid is None above.
    assert (folder / KEEPER_PID).read_text().strip() == str(pid)


def test_a_keeper_whose_run_folder_was_deleted_exits(store):
    """`make clean` (or a test's temp folder going) under a live keeper: it must not poll forever."""
    from backend.records.state import RunState
    store.reserve("gone")
    store.save(RunState("gone", 0.0, {"tasks": []}, {"kind": "command", "command": ["x"]}, []))
    k = keeper.Keeper("gone", store=store, poll_s=0.05, log=lambda msg: None)
    (store.path("gone") / "state.json").unlink()
    assert k._loop() == "stopped"


def fail_first_attempt(flag) -> str:
    """Attempt 1 exits 3 once ``flag`` exists; every later attempt runs (sleeps) until stopped."""
    return ("import os, sys, time\n"
            "if os.environ['TFCONSOLE_ATTEMPT'] == '1':\n"
            f"    while not os.path.exists({str(flag)!r}): time.sleep(0.05)\n"
            "    sys.exit(3)\n"
            "time.sleep(600)\n")


def job_attempts(run_id: str) -> list[str]:
    """The attempt of every live job process of the run (its TFCONSOLE_ATTEMPT), sorted."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            env = dict(v.split("=", 1) for v in (proc / "environ").read_text().split("\0") if "=" in v)
            if env.get("TFCONSOLE_RUN_ID") == run_id and "supervise" not in (proc / "cmdline").read_text():
                found.append(env.get("TFCONSOLE_ATTEMPT", "?"))
        except (OSError, ValueError):
            continue   # not ours to read, or gone
    return sorted(found)


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_keeper_killed_while_it_starts_a_restart_is_resumed_not_failed(local_cluster, store, python_path,
                                                                          tmp_path):
    """kill -9 of the keeper while it starts attempt 2 (the host's start check holds it there for
    3 s): the next `status` must not end the run failed with restarts left (issue 35). It stops
    what the cut-off start began, and a new keeper starts the attempt again, with no restart used."""
    import os
    import signal
    import subprocess
    import sys
    from tests.conftest import ROOT, wait_for
    flag = tmp_path / "fail-now"
    job = command_job(fail_first_attempt(flag), python_path, max_restarts=1, backoff_s=0.2)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    flag.touch()
    wait_for(lambda: (s := store.load(run.run_id)).phase == "launching" and s.attempt == 2, 60,
             "the keeper starting attempt 2", poll=0.05)
    old_keeper = detached.keeper_pid(run.local_dir)
    os.kill(old_keeper, signal.SIGKILL)
    status = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run.run_id],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert status.returncode == 0 and f"run {run.run_id}: failed" not in status.stdout, status.stdout
    assert "keeper not running: started a new one" in status.stdout, status.stdout
    state = wait_for(lambda: (s := store.load(run.run_id)).phase == "running" and s.attempt == 3 and s, 60,
                     "a new keeper to start the attempt again")
    assert state.attempts[1].reason.startswith("launch interrupted"), state.attempts
    # Every task runs once, in the new attempt: nothing of the cut-off start is left.
    assert wait_for(lambda: job_attempts(run.run_id) == ["3", "3"], 10, "one job per task")
    # max_restarts=1 and the restart was cut off, not used: a failure now would still restart.
    assert detached.keeper_pid(run.local_dir) not in (None, old_keeper)
    launcher.attach(run.run_id, store=store).stop(grace_s=2)
    assert_nothing_left(run, store)


@pytest.mark.slow
@pytest.mark.waits   # no task runs: the keeper only fails to start one
def test_a_restart_that_cannot_start_ends_the_run_failed_saying_why(store, python_path, tmp_path, capsys):
    """The keeper died while the run was restarting, and the hosts' run folders are gone since (a
    reboot emptied /tmp): `status` starts a new keeper, which must end the run failed saying why
    once the hosts have had their time to answer, not try every few seconds for ever (a CI run
    left two such keepers polling after the suite had ended)."""
    import backend.cli.main as cli
    from backend.records.state import Phase, RunState, TaskState
    from backend.config.spec import job_to_dict
    from rig import sshd
    job = command_job(HANG, python_path, max_restarts=3, backoff_s=0.2, unreachable_grace_s=2, host_gone_s=2)
    tasks = [{"role": role, "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
              "python": python_path, "workdir": str(tmp_path / "wiped" / role)} for role in ("chief", "worker")]
    store.reserve("wiped")
    store.save(RunState("wiped", 0.0, {"tasks": tasks}, job_to_dict(job),
                        [TaskState(name, i, "127.0.0.1", str(tmp_path / "wiped" / name.split("-")[0] / "run"))
                         for i, name in enumerate(("chief-0", "worker-0"))], phase=Phase.RESTARTING))
    local_dir = store.path("wiped")
    try:
        assert cli.main(["--runs", str(store.root), "status", "wiped"]) == 0
        assert "keeper not running: started a new one" in capsys.readouterr().out
        wait_for(lambda: store.load("wiped").phase == "failed", 60, "the keeper to give up restarting")
        wait_for(lambda: detached.keeper_pid(local_dir) is None, 30, "the keeper to exit")
    finally:
        detached.end_keeper(local_dir)
    assert cli.main(["--runs", str(store.root), "status", "wiped"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("run wiped: failed"), shown
    assert "gave up restarting: attempt 1 could not start for " in shown, shown
    assert "no harness in" in shown and "Fix the cause shown below, then launch again" in shown, shown
