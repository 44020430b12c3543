"""A full disk on the chief (issue 35): Save now and export say so at once, name the host and the
folder to free, and leave no half-written checkpoint behind. The disk is a small tmpfs, filled
to the last byte, mounted over the chief's folder by the test (root) and unmounted after it."""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from backend.runs import launcher
from backend.runs.store import RunStore
from rig import sshd
from tests.conftest import wait_for
from tests.integration.test_cli import ROOT, cli

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def full_disk(folder: Path):
    """``folder`` on a 64 KiB tmpfs with no byte free, for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=True)
    try:
        with open(folder / ".filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:   # until ENOSPC: the disk is full
                fh.write(b"\0" * 1024)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def files(tmp_path: Path, python: str, **params) -> Path:
    cluster = {"tasks": [{"role": "worker", "host": "127.0.0.1", "transport": "local",
                          "tf_port": sshd.free_port(), "python": python,
                          "workdir": str(tmp_path / "host")} for _ in range(2)]}
    job = {"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
           "params": {"epochs": 1, "log_every": 10, **params},
           "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1"}}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    return tmp_path


def test_save_now_on_a_full_disk_fails_at_once_saying_where(tmp_path, python_path):
    """The chief's save hits ENOSPC and the chief exits: `save --wait 90` says so in seconds with
    the cause (it waited the full 90 s and said "the job may be stuck"), and the failed save's
    ckpt-N_temp/ folder is gone."""
    runs = files(tmp_path, python_path, steps_per_epoch=100000, checkpoint_every=0, pace_s=0.005) / "runs"
    run_id = cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), runs=runs).stdout.strip()
    run = launcher.attach(run_id, store=RunStore(runs))
    folder = Path(run.state.chief.remote_run_dir) / "checkpoints"
    try:
        wait_for(lambda: "step 20/" in cli("logs", run_id, "--task", "worker-1", runs=runs).stdout, 180, "step 20")
        with full_disk(folder):
            started = time.monotonic()
            out = cli("save", run_id, "--wait", "90", runs=runs, check=False)
            took = time.monotonic() - started
            left = sorted(p.name for p in folder.iterdir())
    finally:
        if run.reload().live:
            run.stop(grace_s=2)
    assert out.returncode == 2 and took < 30, (took, out.stderr)
    assert f"disk full on 127.0.0.1 (no space left on device): free space in {folder} " in out.stderr, out.stderr
    assert "may be stuck" not in out.stderr
    assert left == [".filler"], left   # no ckpt-N_temp/ (nor any part of the failed save)
    assert run.reload().phase == "failed" and "disk full on 127.0.0.1" in run.state.attempts[-1].reason


@pytest.mark.parametrize(("where", "named"), [("exports", "exports"), ("checkpoints/holds", "checkpoints")])
def test_export_on_a_full_disk_says_the_disk_is_full_and_where(tmp_path, python_path, where, named):
    """The export's own folder, or the folder its hold on the step is written to, on a full disk:
    the answer names the host and the folder to free, not "pick a step from the list"."""
    runs = files(tmp_path, python_path, steps_per_epoch=20, checkpoint_every=10) / "runs"
    cli("launch", str(tmp_path / "cluster.yaml"), str(tmp_path / "job.yaml"), "--run-id", "full",
        "--wait", "240", runs=runs)
    run = launcher.attach("full", store=RunStore(runs))
    assert run.state.phase == "finished"
    folder = Path(run.state.chief.remote_run_dir) / where
    with full_disk(folder):
        out = cli("export", run.run_id, runs=runs, check=False)
    assert out.returncode == 2, out.stdout
    named = Path(run.state.chief.remote_run_dir) / named
    assert "disk full on 127.0.0.1" in out.stderr and f"Free space in {named} " in out.stderr, out.stderr
    assert "pick" not in out.stderr.lower(), out.stderr
