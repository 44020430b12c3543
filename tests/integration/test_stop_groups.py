"""Stop on the host (``proctree.stop`` through hostctl): every group at once, KILL only for what
outlives INT and TERM, named in the answer; a group number reused by another program is never
signalled (issue 27). Local transport, plain Python tasks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from backend.hosts import remote
from backend.client.harness import layout
from tests.conftest import wait_for
from tests.integration.test_hostctl import alive, local_host  # noqa: F401 (fixture)

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]
# Ends on neither INT nor TERM, as a TensorFlow worker waiting on its coordination service.
STUBBORN = [sys.executable, "-c", "import signal, time\n"
            "for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)\n"
            "print('up', flush=True)\ntime.sleep(120)"]


def _start(h, tasks: dict) -> dict:
    started = remote.start(h, [{"task": n, "argv": argv, "env": {}} for n, argv in tasks.items()],
                           wait_s=20, settle_s=0)
    for name in tasks:
        wait_for(lambda: b"up" in remote.read_tail(h, f"logs/{name}.log", 1000), 30, f"{name} up")
    return started


def test_stop_kills_only_what_outlives_int_and_term_and_says_which(local_host):  # noqa: F811
    started = _start(local_host, {"worker-0": SLEEPER, "worker-1": STUBBORN})
    answers = remote.stop_tasks(local_host, ["worker-0", "worker-1"], grace_s=1)
    assert answers["worker-0"]["killed"] is False and answers["worker-1"]["killed"] is True, answers
    assert all(a["left"] == [] for a in answers.values())
    assert not any(alive(s.pid) for s in started.values())


def test_a_group_number_reused_by_another_program_is_never_signalled(local_host):  # noqa: F811
    started = _start(local_host, {"worker-0": SLEEPER})
    assert remote.stop(local_host, ["worker-0"], grace_s=1) == {"worker-0": []}
    # Long after, the system gives the task's group number to another program: simulated by
    # pointing the task's record at another program's group (same user, its own session).
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        record = os.path.join(local_host.run_dir, layout.TASKS, "worker-0.json")
        info = json.loads(open(record).read())
        assert info["pgid"] == started["worker-0"].pgid
        info.update(pgid=other.pid, supervisor=other.pid)
        with open(record, "w") as f:
            json.dump(info, f)
        assert remote.status(local_host, ["worker-0"])["worker-0"].state == "exited"
        answers = remote.stop_tasks(local_host, ["worker-0"], grace_s=1)
        assert "skipped" in answers["worker-0"], answers
        time.sleep(0.3)
        assert other.poll() is None, "stop signalled another program's process group"
    finally:
        other.kill()
        other.wait()
