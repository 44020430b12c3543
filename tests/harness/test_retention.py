"""Retention and holds on a checkpoint folder (backend/client/harness/retention.py, and hostctl.py's
checkpoint subcommands).
No TensorFlow: checkpoints are the files the harness writes, made by hand."""
import json
import os
import subprocess
import threading
import time

import pytest

from .conftest import host_argv

from backend.client.harness import retention
from backend.client.harness.retention import Policy


def make_ckpt(folder, step, *, t, loss=1.0):
    for suffix in ("index", "data-00000-of-00001"):
        (folder / f"ckpt-{step}.{suffix}").write_text("x")
    (folder / f"ckpt-{step}.meta.json").write_text(json.dumps({"step": step, "time": t, "global_loss": loss}))


def steps_on_disk(folder) -> list[int]:
    return sorted(int(n.split("-")[1].split(".")[0]) for n in os.listdir(folder) if n.endswith(".index"))


def tool(sub, folder, *args):
    """``hostctl.py SUB`` on the checkpoint folder ``folder`` (its run directory: the parent)."""
    return subprocess.run([*host_argv(str(folder.parent), "hostctl", sub, site=False), "--run", str(folder.parent),
                           "--dir", folder.name, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_keeps_last_n_then_deletes_after_the_grace(tmp_path):
    now = 1000.0
    for i, step in enumerate((10, 20, 30, 40)):
        make_ckpt(tmp_path, step, t=now - 100 + i * 10)   # 40 written at now-70
    policy = Policy(keep_last=2, grace_s=75)
    # 10 left the last two when 30 came (now-80): past the grace; 20 left at now-70: inside it.
    assert retention.apply(str(tmp_path), policy, now=now) == [10]
    assert steps_on_disk(tmp_path) == [20, 30, 40]
    retention.write_policy(str(tmp_path), policy)
    assert [c["step"] for c in retention.listed(str(tmp_path), now=now)] == [30, 40]   # 20 unlisted


def test_a_held_step_outlives_retention_until_released_or_expired(tmp_path):
    make_ckpt(tmp_path, 10, t=0)
    hold = retention.pin(str(tmp_path), 10, purpose="export", ttl_s=100)
    for step in (20, 30, 40):
        make_ckpt(tmp_path, step, t=step)
    policy = Policy(keep_last=1, grace_s=0)
    retention.apply(str(tmp_path), policy, now=time.time())
    assert steps_on_disk(tmp_path) == [10, 40]
    retention.write_policy(str(tmp_path), policy)
    assert [(c["step"], c["held"]) for c in retention.listed(str(tmp_path))] == [(10, ["export"]), (40, [])]
    assert retention.release(str(tmp_path), hold["hold"]) is True
    retention.apply(str(tmp_path), policy)
    assert steps_on_disk(tmp_path) == [40]
    expiring = retention.pin(str(tmp_path), 40, purpose="restore", ttl_s=5)
    make_ckpt(tmp_path, 50, t=50)
    retention.apply(str(tmp_path), policy, now=expiring["expires"] + 1)
    assert steps_on_disk(tmp_path) == [50]
    assert os.listdir(tmp_path / retention.HOLDS) == []   # the expired hold file went too


def test_best_by_loss_is_kept(tmp_path):
    for step, loss in ((10, 0.5), (20, 0.1), (30, 0.9), (40, 0.7)):
        make_ckpt(tmp_path, step, t=0, loss=loss)
    retention.apply(str(tmp_path), Policy(keep_last=1, keep_best=1, grace_s=0), now=100)
    assert steps_on_disk(tmp_path) == [20, 40]


def test_pin_latest_resolves_once_and_a_gone_step_is_refused(tmp_path):
    for step in (10, 20):
        make_ckpt(tmp_path, step, t=0)
    assert retention.pin(str(tmp_path), None, purpose="export", ttl_s=60)["step"] == 20
    with pytest.raises(retention.HoldError, match=r"step 5 is not complete .*listed now: \[10, 20\]"):
        retention.pin(str(tmp_path), 5, purpose="restore", ttl_s=60)


def test_abandon_moves_newer_steps_aside_and_refuses_a_held_one(tmp_path):
    for step in (10, 20, 30):
        make_ckpt(tmp_path, step, t=0)
    held = retention.pin(str(tmp_path), 30, purpose="export", ttl_s=60)
    with pytest.raises(retention.HoldError, match="step 30 is held"):
        retention.abandon(str(tmp_path), 10, "attempt-2")
    retention.release(str(tmp_path), held["hold"])
    assert retention.abandon(str(tmp_path), 10, "attempt-2") == [20, 30]
    assert steps_on_disk(tmp_path) == [10]
    assert [(c["step"], c["abandoned"]) for c in retention.list_abandoned(str(tmp_path))] == \
        [(20, "attempt-2"), (30, "attempt-2")]


def test_pins_race_a_busy_retention_and_every_pinned_step_survives(tmp_path):
    """A writer saves and prunes as fast as it can; a pinner holds 'latest' again and again.
    Every pin that succeeds must find its checkpoint still complete while held."""
    policy = Policy(keep_last=1, grace_s=0)
    make_ckpt(tmp_path, 1, t=0)
    stop = threading.Event()

    def writer():
        step = 1
        while not stop.is_set():
            step += 1
            make_ckpt(tmp_path, step, t=time.time())
            retention.apply(str(tmp_path), policy)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(200):
            hold = retention.pin(str(tmp_path), None, purpose="export", ttl_s=60)
            time.sleep(0.002)
            assert (tmp_path / f"ckpt-{hold['step']}.meta.json").exists()
            assert (tmp_path / f"ckpt-{hold['step']}.index").exists()
            retention.release(str(tmp_path), hold["hold"])
    finally:
        stop.set()
        thread.join()


def test_hostctl_checkpoint_commands(tmp_path):
    for step in (10, 20):
        make_ckpt(tmp_path, step, t=0)
    pinned = tool("ckpt-hold", tmp_path, "--step", "latest", "--purpose", "export", "--ttl", 60)
    assert pinned.returncode == 0, pinned.stderr
    hold = json.loads(pinned.stdout)
    assert hold["step"] == 20
    listed = json.loads(tool("ckpt-list", tmp_path).stdout)["checkpoints"]
    assert [(c["step"], c["held"]) for c in listed] == [(10, []), (20, ["export"])]
    gone = tool("ckpt-hold", tmp_path, "--step", 99, "--purpose", "restore")
    assert gone.returncode == 3, gone.stderr   # hostctl's FAILED: the same JSON shape as every refusal
    answer = json.loads(gone.stdout)
    assert answer["error"].startswith("checkpoint step 99 is not complete") and answer["missing"] is False
    assert json.loads(tool("ckpt-release", tmp_path, "--hold", hold["hold"]).stdout) == {"released": True}
    assert json.loads(tool("ckpt-abandon", tmp_path, "--after", 10, "--tag", "t1").stdout) == {"moved": [20]}
    assert [c["step"] for c in json.loads(tool("ckpt-abandoned", tmp_path).stdout)["checkpoints"]] == [20]
    outside = tool("ckpt-list", tmp_path / "x", "--dir", "../..")
    assert outside.returncode == 3 and "not inside the run directory" in json.loads(outside.stdout)["error"]
