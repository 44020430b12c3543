"""The run monitor with a real agent through the local transport: exactly-once across kills."""
from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time

import pytest

from backend.hosts.base import Lines
from backend.hosts.local import LocalTransport
from backend.watch.metrics import MetricsStore
from backend.watch import RunMonitor
from backend.watch.journal import MIRROR_DIR, OFFSETS_FILE
from rig.watch_run import agent_pids, append, make_run, metric


def wait_for(predicate, timeout=20.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def dirs(tmp_path):
    return make_run(tmp_path / "remote-run"), tmp_path / "local-run"


def monitor(dirs, store, **kw):
    run, local = dirs
    return RunMonitor(LocalTransport, str(run), str(local), store, python=sys.executable,
                      backoff=(0.05, 0.2), log_lines=100_000, **kw).start()


def produce(run, steps, *, start=0, pause=0.002):
    """Two workers' metrics plus log lines, some written in halves (a reader sees partial lines)."""
    for step in range(start, start + steps):
        append(run / "metrics.jsonl", metric("chief-0", step) + metric("worker-1", step))
        line = f"step {step} " + "noise " * (step % 7)
        if step % 5 == 0:
            append(run / "logs/chief-0.log", line[:4])
            time.sleep(pause)
            append(run / "logs/chief-0.log", line[4:] + "\n")
        else:
            append(run / "logs/chief-0.log", line + "\n")
        if step % 20 == 0:
            time.sleep(pause)


def expected_log(steps):
    return [f"step {s} " + "noise " * (s % 7) for s in range(steps)]


def mirror_metrics(local):
    with open(local / MIRROR_DIR / "metrics.jsonl") as fh:
        return [(r["task"], r["step"]) for r in map(json.loads, fh)]


def test_every_line_exactly_once_across_agent_kills(dirs):
    run, local = dirs
    store = MetricsStore()
    mon = monitor(dirs, store)
    killed = threading.Semaphore(0)

    def produce_in_parts():   # four parts of 750 steps; never more than one part ahead of the kills
        for part in range(4):
            produce(run, 750, start=part * 750)
            if part < 3:
                assert killed.acquire(timeout=60)

    try:
        producer = threading.Thread(target=produce_in_parts)
        producer.start()
        for kill in range(1, 4):   # each kill hits a fresh agent, mid-stream: three, on any machine
            wait_for(lambda: mon.status()["connects"] == kill and agent_pids(run), what=f"agent {kill}")
            for pid in agent_pids(run):
                os.kill(pid, signal.SIGKILL)
            killed.release()
        producer.join()
        wait_for(lambda: len(mon.logs("chief-0")) >= 3000 and store.progress() == 2999,
                 what="all lines")
        time.sleep(0.3)   # room for a duplicate to arrive; the exact checks below would see it
        assert mon.status()["connects"] == 4   # the first connection and one after each kill
        assert mon.logs("chief-0") == expected_log(3000)
        for task in ("chief-0", "worker-1"):
            assert list(store.series(task).step) == list(range(3000))
        # the mirror de-duplicates nothing, so it shows that no line came twice
        assert mirror_metrics(local) == [(t, s) for s in range(3000) for t in ("chief-0", "worker-1")]
    finally:
        mon.stop()
    assert not agent_pids(run)
    # written at stop at the latest (the state file lags the mirror by up to 0.5 s while running)
    offsets = json.loads((local / OFFSETS_FILE).read_text())["offsets"]
    assert offsets["metrics.jsonl"]["offset"] == os.path.getsize(run / "metrics.jsonl")


def test_a_new_console_rebuilds_from_its_mirror_and_resumes(dirs):
    run, local = dirs
    first = monitor(dirs, MetricsStore())
    produce(run, 300)
    wait_for(lambda: len(first.logs("chief-0")) == 300, what="first part")
    first.stop()
    produce(run, 200, start=300)                     # written while nobody watched
    os.rename(run / "logs/chief-0.log", run / "logs/chief-0.log.1")   # and rotated, too
    append(run / "logs/chief-0.log", "after rotation\n")
    store = MetricsStore()
    second = monitor(dirs, store)
    try:
        wait_for(lambda: store.progress() == 499 and len(second.logs("chief-0")) == 501,
                 what="second part")
        assert second.logs("chief-0") == expected_log(500) + ["after rotation"]
        assert list(store.series("worker-1").step) == list(range(500))
        assert mirror_metrics(local) == [(t, s) for s in range(500) for t in ("chief-0", "worker-1")]
    finally:
        second.stop()


def test_artifacts_exits_and_skipped_lines(dirs):
    run, local = dirs
    mon = monitor(dirs, MetricsStore())
    try:
        (run / "checkpoints/ckpt-10.index").write_text("")
        (run / "checkpoints/ckpt-10.meta.json").write_text('{"step": 10, "global_loss": 0.25}')
        (run / "exports/m1").mkdir()
        (run / "exports/m1/result.json").write_text('{"verified": true}')
        (run / "tasks/worker-1.exit").write_text("1")
        append(run / "metrics.jsonl", "{broken\n" + metric("chief-0", 1))
        wait_for(lambda: mon.checkpoints() and mon.exports() and mon.task_exits()
                 and mon.skipped(), what="artifacts")
        assert mon.checkpoints() == {10: {"step": 10, "global_loss": 0.25}}
        assert mon.exports() == {"m1": {"verified": True}}
        assert mon.task_exits() == {"worker-1": 1}
        assert mon.skipped() == {"metrics.jsonl": 1}
        wait_for(lambda: mon.status()["last_heartbeat"], what="heartbeat")
        assert mon.status()["state"] == "connected"
    finally:
        mon.stop()
    assert mon.status()["state"] == "stopped"


def test_polling_mode_through_the_monitor(dirs):
    run, _ = dirs
    store = MetricsStore()
    mon = monitor(dirs, store, poll=True)
    try:
        produce(run, 50)
        wait_for(lambda: store.progress() == 49 and len(mon.logs("chief-0")) == 50, what="poll")
        assert any(b"--poll" in open(f"/proc/{p}/cmdline", "rb").read() for p in agent_pids(run))
    finally:
        mon.stop()


def test_unreachable_host_keeps_retrying_and_says_why(tmp_path):
    def broken():
        raise OSError("connection refused")
    mon = RunMonitor(broken, "/nowhere", str(tmp_path / "l"), MetricsStore(),
                     backoff=(0.01, 0.05)).start()
    try:
        wait_for(lambda: "connection refused" in mon.status()["last_error"], what="error")
        assert mon.running
    finally:
        mon.stop()
    assert not mon.running


class ScriptedStream:
    def __init__(self, lines):
        self.stdout = Lines("scripted", io.BytesIO(b"".join(lines)), (OSError,))

    def alive(self):
        return False

    def close(self):
        pass


class ScriptedTransport:
    """Plays one scripted agent session per connect; records the argv it was asked to run."""
    host = "scripted"

    def __init__(self, sessions, argvs):
        self.sessions, self.argvs = sessions, argvs

    def stream(self, argv, *, idle_timeout=None):
        self.argvs.append(list(argv))
        return ScriptedStream(self.sessions.pop(0) if self.sessions else [])

    def close(self):
        pass


def test_a_batch_cut_short_is_dropped_and_the_agent_resumes_from_committed_offsets(tmp_path):
    log = lambda text: json.dumps({"type": "log", "task": "chief-0", "line": text}).encode() + b"\n"
    offs = lambda n: json.dumps({"type": "offsets", "offsets": {
        "logs/chief-0.log": {"inode": 7, "offset": n}}}).encode() + b"\n"
    sessions = [[log("a"), offs(2), log("b")],          # the stream breaks before b's offsets
                [log("b"), log("c"), offs(6)]]          # the agent resends b from offset 2
    argvs = []
    mon = RunMonitor(lambda: ScriptedTransport(sessions, argvs), "/r", str(tmp_path / "l"),
                     MetricsStore(), backoff=(0.01, 0.01), log_lines=10).start()
    try:
        wait_for(lambda: mon.logs("chief-0") == ["a", "b", "c"], what="resent batch")
        time.sleep(0.1)
        assert mon.logs("chief-0") == ["a", "b", "c"]
        resumed = json.loads(argvs[1][argvs[1].index("--offsets-json") + 1])
        assert resumed == {"logs/chief-0.log": {"inode": 7, "offset": 2}}
        assert "--offsets-json" not in argvs[0]
    finally:
        mon.stop()


def test_a_metrics_block_cut_short_is_dropped_and_sent_again(tmp_path):
    rows = [metric("chief-0", step).encode() for step in (1, 2, 3)]
    block = lambda lines: json.dumps({"type": "metrics", "lines": len(lines),
                                      "bytes": len(b"".join(lines))}).encode() + b"\n" + b"".join(lines)
    offs = lambda n: json.dumps({"type": "offsets", "offsets": {
        "metrics.jsonl": {"inode": 7, "offset": n}}}).encode() + b"\n"
    whole = block(rows)
    sessions = [[block(rows[:1]), offs(len(rows[0])), whole[:len(whole) - 40]],   # cut mid-block
                [block(rows[1:]), offs(len(b"".join(rows)))]]
    argvs, store = [], MetricsStore()
    mon = RunMonitor(lambda: ScriptedTransport(sessions, argvs), "/r", str(tmp_path / "l"),
                     store, backoff=(0.01, 0.01)).start()
    try:
        wait_for(lambda: len(argvs) >= 2 and store.tasks() and store.series("chief-0").step.size == 3,
                 what="the resent block")
        assert list(store.series("chief-0").step) == [1, 2, 3]
        resumed = json.loads(argvs[1][argvs[1].index("--offsets-json") + 1])
        assert resumed == {"metrics.jsonl": {"inode": 7, "offset": len(rows[0])}}
    finally:
        mon.stop()


def test_monitor_over_real_ssh_and_the_agent_dies_with_its_channel(
        dirs, ssh_hosts, client_key, ssh_options, python_path):
    from backend.hosts.ssh import SSHTransport
    run, local = dirs
    host = ssh_hosts[0]
    factory = lambda: SSHTransport(host.address, port=host.port, identity_file=str(client_key),
                                   options=ssh_options)
    store = MetricsStore()
    mon = RunMonitor(factory, str(run), str(local), store, python=python_path,
                     backoff=(0.05, 0.2)).start()
    try:
        produce(run, 100)
        wait_for(lambda: store.progress() == 99 and len(mon.logs("chief-0")) == 100, what="ssh")
        assert mon.logs("chief-0") == expected_log(100)
    finally:
        mon.stop()
    wait_for(lambda: not agent_pids(run), timeout=10, what="the remote agent to exit")
