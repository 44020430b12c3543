"""One import name (issue 36): the installed project makes `import tfconsole` work from any folder,
and `tfconsole.launch(cluster, job)` drives a real run of two local tasks from a script that
knows nothing of `backend`: to the end, then status, and a second run stopped while it runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from rig import sshd

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, sys
import tfconsole

print(json.dumps({"module": tfconsole.__file__, "backend_loaded": "backend.runs" in sys.modules}))
job = {"kind": "command",   # a dict here, a file for the cluster: both are accepted
       "command": [sys.executable, "-c", "import tfconsole\nfor s in range(1, 6): tfconsole.report(s, loss=1 / s)"]}
run = tfconsole.launch("cluster.yaml", job, runs="runs", preflight=False)
phase = run.wait(timeout=90)
status = run.status()
print(json.dumps({"run": run.run_id, "phase": phase, "status": status}))

long = tfconsole.launch("cluster.yaml", {"kind": "command", "command": [sys.executable, "-c",
                        "import time; time.sleep(120)"]}, runs="runs", preflight=False)
live = long.status()["phase"]
long.stop()
print(json.dumps({"live": live, "stopped": long.status()["phase"], "after_wait": long.wait(timeout=5)}))
try:
    tfconsole.attach("no-such-run", runs="runs")
except tfconsole.ConsoleError as err:
    print(json.dumps({"error": str(err)}))
'''


def test_a_script_outside_the_checkout_launches_waits_and_stops_runs(tmp_path):
    workdir = tmp_path / "hosts"
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
         "python": sys.executable, "workdir": str(workdir)} for _ in range(2)]}))
    (tmp_path / "drive.py").write_text(SCRIPT)
    # No PYTHONPATH, a folder with no checkout above it: only the installed package can answer.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TFCONSOLE_RUNS")}
    out = subprocess.run([sys.executable, "drive.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, ended, stopped, refused = (json.loads(line) for line in out.stdout.splitlines())

    assert first == {"module": str(ROOT / "backend" / "client" / "__init__.py"), "backend_loaded": False}
    assert ended["phase"] == "finished"
    status = ended["status"]
    assert status["run_id"] == ended["run"] and status["phase"] == "finished" and status["attempt"] == 1
    assert [(t["name"], t["state"], t["exit_code"]) for t in status["tasks"]] == \
        [("worker-0", "exited", 0), ("worker-1", "exited", 0)]
    lines = (tmp_path / "hosts").glob(f"runs/{ended['run']}.*/metrics.jsonl")
    assert [json.loads(x)["step"] for x in next(lines).read_text().splitlines()] == [1, 2, 3, 4, 5]

    assert stopped == {"live": "running", "stopped": "stopped", "after_wait": "stopped"}
    assert "no-such-run" in refused["error"]
