"""The watch agent as a real subprocess over real files."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backend.watch import local_agent
from backend.client.harness.watch import needs_polling
from rig.watch_run import AgentProc, append, make_run, metric


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run")


@pytest.fixture(params=["inotify", "poll"])
def agent(request, run):
    extra = ("--poll", "--poll-interval", "0.1") if request.param == "poll" else ()
    a = AgentProc(run, *extra)
    yield a
    a.close()


def test_appended_lines_arrive_in_order(agent, run):
    append(run / "logs/chief-0.log", "one\ntwo\n")
    append(run / "metrics.jsonl", metric("chief-0", 1) + metric("worker-1", 1))
    agent.wait(lambda: len(agent.lines("chief-0")) == 2 and len(agent.metrics()) == 2)
    append(run / "logs/chief-0.log", "three\n")
    agent.wait(lambda: agent.lines("chief-0") == ["one", "two", "three"])
    assert [(m["task"], m["step"]) for m in agent.metrics()] == [("chief-0", 1), ("worker-1", 1)]
    last = agent.of("offsets")[-1]["offsets"]
    assert last["logs/chief-0.log"]["offset"] == len("one\ntwo\nthree\n")
    assert last["logs/chief-0.log"]["inode"] == os.stat(run / "logs/chief-0.log").st_ino


def test_partial_line_is_held_until_complete(agent, run):
    append(run / "logs/worker-1.log", "done\nhalf a li")
    agent.wait(lambda: agent.lines("worker-1") == ["done"])
    agent.settle()
    assert agent.lines("worker-1") == ["done"]
    assert agent.of("offsets")[-1]["offsets"]["logs/worker-1.log"]["offset"] == 5
    append(run / "logs/worker-1.log", "ne\r\n")
    agent.wait(lambda: agent.lines("worker-1") == ["done", "half a line"])


def test_truncation_starts_again_from_zero(agent, run):
    log = run / "logs/chief-0.log"
    append(log, "a long first line\nanother long line\n")
    agent.wait(lambda: len(agent.lines("chief-0")) == 2)
    log.write_text("new\n")           # shorter than what was read: truncated in place
    agent.wait(lambda: agent.lines("chief-0")[-1:] == ["new"])
    assert len(agent.lines("chief-0")) == 3


def test_rotation_reads_the_old_rest_then_the_new_file(agent, run):
    log = run / "logs/chief-0.log"
    append(log, "a\n")
    agent.wait(lambda: agent.lines("chief-0") == ["a"])
    with open(log, "a") as old:       # the writer still holds the old file when it is rotated
        old.write("b\n")
        old.flush()
        os.rename(log, run / "logs/chief-0.log.1")
        old.write("c\n")
    append(log, "d\n")
    agent.wait(lambda: agent.lines("chief-0") == ["a", "b", "c", "d"])
    agent.settle()
    assert agent.lines("chief-0") == ["a", "b", "c", "d"]


def test_garbage_and_huge_lines_are_skipped_and_counted(agent, run):
    huge = "x" * (3 << 20)   # 3 MB: past the 1 MB limit and the read chunk
    append(run / "metrics.jsonl", metric("chief-0", 1) + "not json\n[1, 2]\n" + huge + "\n"
           + metric("chief-0", 2))
    append(run / "logs/chief-0.log", huge + "\nafter\n")
    agent.wait(lambda: len(agent.metrics()) == 2 and agent.lines("chief-0") == ["after"])
    skipped = {}
    for e in agent.of("skipped"):
        skipped[e["file"]] = skipped.get(e["file"], 0) + e["count"]
    assert skipped == {"metrics.jsonl": 3, "logs/chief-0.log": 1}


def test_checkpoint_reported_once_and_only_when_complete(agent, run):
    ck = run / "checkpoints"
    (ck / "ckpt-100.data-00000-of-00001").write_bytes(b"\0" * 1000)
    (ck / "ckpt-100.index").write_bytes(b"idx")
    agent.settle()
    (ck / "ckpt-100.meta.json").write_text('{"step": 100, "losses": {"chief-0"')  # half written
    agent.settle()
    assert agent.of("checkpoint") == []
    (ck / "ckpt-100.meta.json").write_text(json.dumps({"step": 100, "global_loss": 0.5}))
    agent.wait(lambda: len(agent.of("checkpoint")) == 1)
    append(run / "logs/chief-0.log", "more\n")   # more events; the checkpoint must not come again
    agent.wait(lambda: agent.lines("chief-0") == ["more"])
    agent.settle()
    assert agent.of("checkpoint") == [{"type": "checkpoint", "step": 100,
                                       "meta": {"step": 100, "global_loss": 0.5}}]


def test_export_and_task_exit(agent, run):
    tmp = run / "exports/.tmp-abc"
    tmp.mkdir()
    (tmp / "result.json").write_text('{"ok": true}')
    agent.settle()
    assert agent.of("export") == []
    os.rename(tmp, run / "exports/final")
    (run / "tasks/worker-1.exit").write_text("")
    agent.wait(lambda: len(agent.of("export")) == 1)
    (run / "tasks/worker-1.exit").write_text("3\n")
    agent.wait(lambda: len(agent.of("task_exit")) == 1)
    agent.settle()
    assert agent.of("export")[0]["name"] == "final" and agent.of("export")[0]["result"] == {"ok": True}
    assert [(e["task"], e["exit_code"]) for e in agent.of("task_exit")] == [("worker-1", 3)]


def test_existing_artifacts_are_sent_on_start_and_heartbeat_comes(run):
    (run / "checkpoints/ckpt-5.index").write_text("")
    (run / "checkpoints/ckpt-5.meta.json").write_text('{"step": 5}')
    (run / "exports/e1").mkdir()
    (run / "exports/e1/result.json").write_text("{}")
    a = AgentProc(run)
    try:
        a.wait(lambda: a.of("checkpoint") and a.of("export") and a.of("heartbeat"))
    finally:
        a.close()


def test_subfolders_created_after_start_are_watched(tmp_path):
    run = tmp_path / "late"
    run.mkdir()
    a = AgentProc(run)
    try:
        a.settle()   # the agent runs and has scanned the empty folder before logs/ appears
        append(run / "logs/chief-0.log", "hi\n")
        a.wait(lambda: a.lines("chief-0") == ["hi"], timeout=5)
    finally:
        a.close()


def test_exits_when_stdin_closes(run):
    proc = subprocess.Popen([*local_agent(), "--run-dir", str(run)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    proc.stdin.close()
    assert proc.wait(5) == 0


def test_exits_on_sigterm(run):
    a = AgentProc(run)
    a.wait(lambda: a.of("heartbeat"))
    assert a.close() == 0


def test_network_filesystems_are_polled(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/sda1 / ext4 rw 0 0\n"
                      "srv:/home /home/shared nfs4 rw 0 0\n"
                      "sshfs#me@h: /mnt/my\\040box fuse.sshfs rw 0 0\n")
    assert needs_polling("/home/shared/runs/r1", str(mounts))
    assert needs_polling("/mnt/my box/run", str(mounts))
    assert not needs_polling("/home/sharedx/run", str(mounts))
    assert not needs_polling("/tmp/run", str(mounts))


def test_a_long_backlog_streams_out_in_bounded_batches(run):
    line = "y" * 999 + "\n"
    append(run / "logs/chief-0.log", line * 20_000)          # 20 MB before the agent starts
    a = AgentProc(run)
    try:
        a.wait(lambda: len(a.lines("chief-0")) == 20_000, timeout=30)
        offsets = [e["offsets"]["logs/chief-0.log"]["offset"] for e in a.of("offsets")]
        assert len(offsets) >= 3 and offsets[-1] == 20_000_000
        assert max(b - a_ for a_, b in zip([0] + offsets, offsets)) <= (8 << 20) + len(line) * 1100
    finally:
        a.close()
