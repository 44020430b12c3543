"""Chief-only actions through the backend, over real sshd: save now, export, restore."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from backend import checkpoints
from backend.runs import launcher, restore
from backend.errors import ArtifactError, RunError
from backend.runs.store import RunStore
from backend.config.spec import job_from_dict

ROOT = Path(__file__).resolve().parents[2]


def metrics(run) -> list[dict]:
    chief = run.state.chief
    out = run.transport(chief.name).run(["cat", f"{chief.remote_run_dir}/metrics.jsonl"]).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_save_export_restore(ssh_cluster, ssh_options, tmp_path):
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         # pace_s: 120 steps take at least 12 s, so the save lands mid-run
                         # however fast the machine (unpaced, a quiet machine ran all 120 steps
                         # before the request reached the chief)
                         "params": {"epochs": 2, "steps_per_epoch": 60, "checkpoint_every": 30,
                                    "log_every": 5, "pace_s": 0.1}})
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    try:
        saved = checkpoints.save_now(run, wait_s=120)
        assert saved < 120, "the save should land mid-run"
        steps = [c["step"] for c in checkpoints.list_checkpoints(run)]
        assert saved in steps
        assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
        run.wait(timeout=300)
    finally:
        if run.state.live:
            run.stop()
    assert run.state.phase == "finished"

    result = checkpoints.export(run, step=saved, name="first")
    assert result["match"] is True and result["step"] == saved
    with pytest.raises(ArtifactError, match="first"):
        checkpoints.export(run, step=saved, name="first")       # never overwritten
    with pytest.raises(ArtifactError):
        checkpoints.export(run, name="../escape")
    assert [e["name"] for e in checkpoints.list_exports(run)] == ["first"]
    with pytest.raises(RunError, match="not live"):
        checkpoints.save_now(run)

    # The worker lacks the step: restore copies the chief's files to it, then resumes there.
    worker_dir = Path(checkpoints.checkpoint_dir(run, "worker-0"))
    for f in worker_dir.glob(f"ckpt-{saved}.*"):
        f.unlink()
    last_before = [m for m in metrics(run) if m["step"] <= saved][-1]
    restore.restore(run, saved)
    run.wait(timeout=300)
    assert saved in [c["step"] for c in checkpoints.list_checkpoints(run, "worker-0")]
    resumed = [m for m in metrics(run) if m["attempt"] == run.state.attempt]
    assert resumed and resumed[0]["step"] > saved and resumed[-1]["step"] == 120
    # Not back at the start: the first loss after resuming is near the last one before it.
    assert resumed[0]["global"]["loss"] < 3 * last_before["global"]["loss"] + 0.05
    assert resumed[0]["global"]["loss"] < metrics(run)[0]["global"]["loss"]


def test_save_now_on_a_run_that_ended_says_so_at_once(local_cluster, tmp_path):
    """A page opened while the run was live, Save now clicked after it ended: the request is never
    answered, and the operator hears so in seconds, not at the end of the wait."""
    store = RunStore(tmp_path / "runs")
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 1, "steps_per_epoch": 20, "log_every": 5}})
    run = launcher.launch(local_cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    seen_live = launcher.attach(run.run_id, store=store)     # the page's handle: still live
    assert seen_live.state.live
    run.wait(timeout=300)
    assert run.state.phase == "finished"
    started = time.monotonic()
    with pytest.raises(RunError, match=r"ended \(finished\) before it saved"):
        checkpoints.save_now(seen_live, wait_s=120)
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_export_latest_and_restore_oldest_while_checkpoints_rotate(ssh_cluster, ssh_options, tmp_path):
    """A run that checkpoints about every second and keeps three: Export "latest" and Restore of
    the oldest listed step each succeed and use the step they named. Once each here, through the
    backend; the browser test (tests/e2e/test_checkpoints_browser.py) does each three times in a
    row from the page, over the same backend."""
    from tests.conftest import wait_for
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": {"epochs": 1, "steps_per_epoch": 1_000_000, "checkpoint_every": 50,
                                    "log_every": 10, "keep_checkpoints": 3,
                                    # 20 ms asleep per step leaves the cores to the exports and
                                    # restores (115 -> 93 s here), and still a checkpoint a second
                                    "pace_s": 0.02}})
    run = launcher.launch(ssh_cluster, job, store=RunStore(tmp_path / "runs"), options=ssh_options,
                          preflight=launcher.Preflight.SKIP)
    try:
        wait_for(lambda: len(checkpoints.list_checkpoints(run)) >= 3, 180, "three checkpoints")
        named = []
        result = checkpoints.export(run, name="latest", formats=("keras",), on_step=named.append)
        assert result["match"] is True and [result["step"]] == named
        assert [e["name"] for e in checkpoints.list_exports(run)] == ["latest"]

        wait_for(lambda: len(checkpoints.list_checkpoints(run)) >= 3, 180, "three checkpoints")
        listed = [c["step"] for c in checkpoints.list_checkpoints(run)]
        oldest, newest = listed[0], listed[-1]
        began = time.time()
        outcome = restore.restore(run, oldest)
        assert outcome.step == oldest and outcome.attempt == run.state.attempt
        assert outcome.resumed == {t.name: oldest for t in run.state.tasks}
        assert newest in outcome.moved_aside[run.state.chief.name]
        # Nothing newer than the restored step is listed unless this attempt wrote it.
        for c in checkpoints.list_checkpoints(run):
            assert c["step"] <= oldest or c["time"] > began, (c["step"], oldest)
        assert newest in [c["step"] for c in checkpoints.list_abandoned(run)]
        assert run.state.phase == "running"
        assert [a.resume_step for a in run.state.attempts] == [None, oldest]
    finally:
        if run.state.live:
            run.stop(grace_s=3)
