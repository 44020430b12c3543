"""harness/startup.py: the start-up watcher, as a real child process of a real worker-like process.

No TensorFlow here: a process that blocks (as MultiWorkerMirroredStrategy's constructor does,
holding the GIL) stands in for strategy creation; the watcher must end it with the reason.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from backend.client.harness import startup
from tests.harness.conftest import free_ports

# Blocks in C without releasing the GIL, as TensorFlow's coordination service wait does.
WORKER = """import os, sys, time
from backend.client.harness import startup
with startup.bounded("worker-0", float(sys.argv[2])):
    if sys.argv[3] == "block":
        import ctypes
        ctypes.CDLL(None).sleep(120)
print("strategy created", flush=True)
"""


def tf_config(*addresses: str) -> str:
    return json.dumps({"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": 0}})


def run_worker(config: str, timeout_s: float, mode: str) -> subprocess.CompletedProcess:
    """The worker's outcome; ``args`` holds its pid (its watcher names it as ``--parent``)."""
    with subprocess.Popen([sys.executable, "-c", WORKER, "-", str(timeout_s), mode],
                          env={**os.environ, "TF_CONFIG": config}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.pid, proc.returncode, out, err)


def test_peers_and_reach():
    me, other = free_ports(2)
    cfg = json.loads(tf_config(f"127.0.0.1:{me}", f"127.0.0.1:{other}", "nohost.invalid:2000"))
    peers = startup.peers(cfg, "worker-0")
    assert [p.name for p in peers] == ["worker-1", "worker-2"]
    assert "refused" in startup.reach(peers[0])
    assert startup.UNRESOLVED in startup.reach(peers[1])
    with socket.socket() as s:
        s.bind(("127.0.0.1", other))
        s.listen()
        assert startup.reach(peers[0]) is None


def test_a_peer_name_that_does_not_resolve_fails_before_the_strategy():
    (me,) = free_ports(1)
    proc = run_worker(tf_config(f"127.0.0.1:{me}", "nohost.invalid:24001"), 2, "block")
    assert proc.returncode == 1 and "strategy created" not in proc.stdout
    assert "waiting for worker-1 at nohost.invalid:24001: name does not resolve" in proc.stdout
    assert ("StartupError: cluster start-up failed after 2 s (startup_timeout_s): waiting for worker-1 at "
            "nohost.invalid:24001: name does not resolve") in proc.stderr


def test_a_peer_that_never_starts_ends_the_blocked_worker_with_the_reason():
    me, other = free_ports(2)   # nothing will listen on `other`: connections are refused
    proc = run_worker(tf_config(f"127.0.0.1:{me}", f"127.0.0.1:{other}"), 1, "block")
    assert proc.returncode == -signal.SIGKILL
    assert "strategy created" not in proc.stdout
    assert f"waiting for worker-1 at 127.0.0.1:{other}: connection refused" in proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("[worker-0] HARNESS FAILED: cluster start-up failed after ")
    # Refused often means "still loading TensorFlow": it gets REFUSED_FACTOR times the timeout.
    assert f"(startup_timeout_s 1): waiting for worker-1 at 127.0.0.1:{other}: connection refused" in last
    seconds = int(last.split("failed after ")[1].split()[0])
    assert seconds >= startup.REFUSED_FACTOR * 1


def test_a_start_up_that_finishes_leaves_no_watcher_and_no_failure():
    me, other = free_ports(2)
    with socket.socket() as s:   # the peer is up
        s.bind(("127.0.0.1", other))
        s.listen()
        proc = run_worker(tf_config(f"127.0.0.1:{me}", f"127.0.0.1:{other}"), 3, "done")
    assert proc.returncode == 0 and "strategy created" in proc.stdout
    assert "HARNESS FAILED" not in proc.stdout
    # This worker's watcher only: real runs of other tests beside this one have watchers too.
    left = subprocess.run(["pgrep", "-f", f"startup.py --me worker-0 .*--parent {proc.args} "],
                          capture_output=True, text=True).stdout
    assert not left.strip()
