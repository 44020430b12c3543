"""The console machine's disk fills under a live run (issue 47): a real tmpfs mounted on the runs
folder, filled to ENOSPC and freed again, with a plain command job (no TensorFlow) kept by a real
keeper process. And the keeper found by every reader, whatever raced to start it."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.config.spec import job_from_dict
from backend.runs import detached, launcher
from backend.runs.store import RunStore
from tests.conftest import ROOT, wait_for
from tests.faults.conftest import assert_nothing_left, command_job, record, tmpfs, wait_phase
from tests.webhook import Receiver


@pytest.fixture
def small_disk(tmp_path):
    """The runs folder on a 4 MiB tmpfs of its own, unmounted at the end."""
    with tmpfs(tmp_path / "runs") as root:
        yield root


def fill(folder: Path) -> Path:
    """Write zeros until the disk says ENOSPC; the file that holds them."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def once_then_until(flag: Path, done: Path) -> str:
    """One task exits 3 when ``flag`` appears (it takes the flag away: once); every task exits 0
    when ``done`` appears."""
    return (f"import os, sys, time\nwhile not os.path.exists({str(done)!r}):\n    time.sleep(0.05)\n"
            f"    try:\n        os.remove({str(flag)!r})\n        sys.exit(3)\n"
            "    except FileNotFoundError:\n        pass\n")


def status(store: RunStore, run_id: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "status", run_id],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_full_console_disk_holds_the_run_and_the_keeper_goes_on_once_freed(
        small_disk, local_cluster, python_path, tmp_path):
    store, receiver = RunStore(small_disk), Receiver()
    flag, done = tmp_path / "fail-once", tmp_path / "done"
    job = job_from_dict({"kind": "command", "command": [python_path, "-c", once_then_until(flag, done)],
                         "restart": {"mode": "on_failure", "max_restarts": 2, "backoff_s": 0.2},
                         "alerts": {"webhook": receiver.url, "format": "json"}})
    try:
        run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
        keeper = detached.keeper_pid(run.local_dir)
        filler = fill(small_disk)
        flag.touch()   # a worker dies while nothing can be recorded
        said = f"disk full on the console machine: free space in {run.local_dir}"
        alert = receiver.wait(1, 30)[0]
        assert alert["event"] == "disk_full" and said in alert["reason"], alert
        out = status(store, run.run_id)
        assert out.returncode == 0 and said in out.stdout, (out.returncode, out.stdout, out.stderr)
        assert "exited(3)" in out.stdout and "running, attempt 1" in out.stdout, out.stdout
        time.sleep(3)   # polls of the keeper on a full disk: it was dead by now
        assert detached.keeper_pid(run.local_dir) == keeper, "the keeper died on the full disk"
        assert len(store.load(run.run_id).attempts) == 1   # held: nothing started nor recorded
        filler.unlink()
        freed = time.monotonic()
        wait_for(lambda: len(store.load(run.run_id).attempts) == 2, 60, "the restart once there is room")
        resumed_s = time.monotonic() - freed
        done.touch()
        state = wait_phase(store, run.run_id, ("finished", "failed", "stopped"), 60)
        assert state.phase == "finished" and state.attempts[0].reason.endswith(" exited(3)"), state
        out = status(store, run.run_id)   # every reader agrees on the one end
        assert out.returncode == 0 and f"run {run.run_id}: finished, attempt 2" in out.stdout, out.stdout
        log = (run.local_dir / detached.KEEPER_LOG).read_text()
        assert said in log and "room again on the console machine's disk" in log, log
        assert "unexpected error" not in log and log.endswith("\n"), log
        assert not list(run.local_dir.rglob("*.tmp")), "a half-written record was left"
        assert_nothing_left(run, store)
        record("console_disk_full", resumed_after_freeing_s=resumed_s)
    finally:
        receiver.close()
        done.touch()   # the job's tasks end, whatever happened to the run
        if "run" in locals():
            launcher.attach(run.run_id, store=store).stop(grace_s=2)
            wait_for(lambda: detached.keeper_pid(store.path(run.run_id)) is None, 30, "the keeper to exit")


@pytest.mark.slow
@pytest.mark.waits   # command jobs: nothing trains
def test_a_reader_that_starts_a_second_keeper_does_not_hide_the_first(local_cluster, python_path, tmp_path):
    """Two readers saw no keeper and both started one: the second loses the lock and exits, but
    its pid, written after the winner's, named a dead process: status started keepers for ever
    and Stop could not end the live one. Nor does a keeper that could not write its pid file
    (a full disk) go unseen: its lock names it."""
    store = RunStore(tmp_path / "runs")
    job = command_job("import time; time.sleep(600)", python_path, max_restarts=1)
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    log = run.local_dir / detached.KEEPER_LOG
    wait_for(lambda: "keeping run" in log.read_text(), 30, "the keeper to take its lock")
    first = detached.keeper_pid(run.local_dir)
    second = detached.start_keeper(run.run_id, store.root, run.pool.options)   # the racing reader's
    wait_for(lambda: "already has a keeper" in log.read_text(), 30, "the second keeper to give up")
    wait_for(lambda: not Path(f"/proc/{second}").exists(), 30, "the second keeper to exit")
    assert detached.keeper_pid(run.local_dir) == first
    (run.local_dir / detached.KEEPER_PID).unlink()
    assert detached.keeper_pid(run.local_dir) == first   # found by the lock it holds
    launcher.attach(run.run_id, store=store).stop(grace_s=2)
    assert_nothing_left(run, store)
