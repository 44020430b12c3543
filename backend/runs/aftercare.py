"""After a stop: every task's log copied here and the hosts' versions kept, off the stop's path.

``Run.stop`` returns once every host has said that nothing of the run is left. Reading each task's
log end (up to ``logcopy.SNAPSHOT_READ``) and versions file came after that, one task after
another, and made a 32-task stop 7x a 2-task one (65 % and 15 % of its time). A
detached process does it now (``Run.mirror_logs``: every task at once, ``logcopy.READS_AT_ONCE``
log reads in flight), and gives up after ``DEADLINE_S``. Until its copies land,
``Run.log_tail`` reads the hosts, as it does for a live run.

The process's argv names no run (the run comes on stdin): after "no process left", ``ps`` shows
nothing that names the run. It drops the task mark (``harness/taskenv.GROUP``) that a stop run from
inside a task would hand on, so a later stop never takes it for one of the job's processes.

    python -m backend.runs.aftercare_process   (stdin: {"runs": ROOT, "run": RUN_ID, "ssh_options": {...}})

This module only starts that process (``Run.stop`` imports it); the process's own code, which
attaches to the run, is ``aftercare_process`` (so runs/ has no import circle).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from backend.client.harness.contract import taskenv
from backend.hosts.ssh import SSHOptions

DEADLINE_S = 300.0   # each host command has its own timeout; this bounds the whole process
LOG = "aftercare.log"
REPO_ROOT = Path(__file__).resolve().parents[2]


def start(run_id: str, runs_root: Path, options: SSHOptions) -> subprocess.Popen:
    """Start the copy detached (own session, output to ``runs/<id>/aftercare.log``)."""
    env = {k: v for k, v in os.environ.items() if k != taskenv.GROUP}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    order = json.dumps({"runs": str(Path(runs_root).resolve()), "run": run_id, "ssh_options": asdict(options)})
    with open(Path(runs_root) / run_id / LOG, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "backend.runs.aftercare_process"], cwd=REPO_ROOT, env=env,
                                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    try:
        proc.stdin.write(order.encode())
        proc.stdin.close()
    except OSError:
        pass   # it died at start: its log says why; the copies are best effort
    threading.Thread(target=proc.wait, daemon=True).start()   # reaped: no zombies in a console
    return proc
