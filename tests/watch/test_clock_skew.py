"""A console whose clock is 2 h ahead of its hosts' (issue 47): the console side runs under
libfaketime (Debian's `faketime`), the host side (sshd, the watch agent, the metrics) on the
true clock, and Monitor's stall line must not take the skew for 7200 s without a step."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from tests.conftest import ROOT, require
from rig.watch_run import append, make_run

# The console side: a real RunMonitor over real SSH, then the page's own stall line. libfaketime
# 0.9.10 makes time.sleep fail (EINVAL: clock_nanosleep with an absolute time), so this process
# sleeps on an Event, whose wait uses the monotonic clock that FAKETIME_DONT_FAKE_MONOTONIC keeps.
CONSOLE = """
import json, sys, threading, time
time.sleep = lambda s: threading.Event().wait(s)
from types import SimpleNamespace
from backend.config.spec import RestartMode, RestartPolicy
from backend.hosts.ssh import SSHOptions, SSHTransport
from backend.watch import RunMonitor
from backend.watch.metrics import MetricsStore
from console import monitor_view
a = json.loads(sys.argv[1])
store = MetricsStore()
mon = RunMonitor(lambda: SSHTransport(a["host"], port=a["port"], identity_file=a["key"],
                                      options=SSHOptions(**a["options"])),
                 a["run"], a["local"], store, python=sys.executable, backoff=(0.05, 0.2)).start()
deadline = time.monotonic() + 60
while not (store.progress() and mon.status().get("chief_clock")) and time.monotonic() < deadline:
    time.sleep(0.1)
live = SimpleNamespace(metrics=store, run=SimpleNamespace(state=SimpleNamespace(live=True), job=SimpleNamespace(
    restart=RestartPolicy(mode=RestartMode(a["mode"]), stall_timeout_s=300))))
print(json.dumps({"clock": time.time(), "step": store.progress(),
                  "warning": monitor_view.stall_warning(live, mon.status(), now=time.time())}))
mon.stop()
"""


def test_a_console_clock_2h_ahead_does_not_see_a_healthy_run_as_stalled(
        tmp_path, ssh_hosts, client_key, ssh_options):
    require("faketime", bool(shutil.which("faketime")))
    run = make_run(tmp_path / "remote-run")
    now = time.time()   # the hosts' clock: the chief's metrics stamp their steps with it
    append(run / "metrics.jsonl", "".join(
        json.dumps({"run_id": "r", "attempt": 1, "task": task, "step": step, "time": now - 3 + step,
                    "loss": 1.0}) + "\n" for step in (1, 2, 3) for task in ("chief-0", "worker-1")))
    host = ssh_hosts[0]
    args = {"host": host.address, "port": host.port, "key": str(client_key), "run": str(run),
            "local": str(tmp_path / "local"),
            "options": {"known_hosts": ssh_options.known_hosts, "ssh_config": ssh_options.ssh_config,
                        "allow_agent": False, "look_for_keys": False}}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    for mode in ("on_failure", "never"):   # both of Monitor's stall lines
        out = subprocess.run(["faketime", "-f", "+2h", sys.executable, "-c", CONSOLE,
                              json.dumps({**args, "mode": mode})],
                             capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-3000:]
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["clock"] - time.time() > 7000, seen      # the console really was 2 h ahead
        assert seen["step"] == 3 and seen["warning"] == "", seen   # was "No step since 7200 s"
