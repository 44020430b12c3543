"""The after-stop copy as its own process (``aftercare.start`` launches it): every task's log copied
and the hosts' versions kept for one ended run, then exit; bounded by ``aftercare.DEADLINE_S``."""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from backend.hosts.ssh import SSHOptions
from backend.runs import launcher
from backend.runs.aftercare import DEADLINE_S
from backend.runs.store import RunStore


def main() -> int:
    order = json.loads(sys.stdin.read())
    timer = threading.Timer(DEADLINE_S, lambda: os._exit(3))   # a host that hangs past every timeout
    timer.daemon = True
    timer.start()
    run = launcher.attach(order["run"], store=RunStore(Path(order["runs"])),
                          options=SSHOptions(**order["ssh_options"]))
    missed = run.mirror_logs()
    if missed:
        print(f"run {run.run_id}: no log copied from {', '.join(missed)} (host did not answer)", flush=True)
    run.pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
