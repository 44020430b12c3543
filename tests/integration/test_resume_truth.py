"""Restore tells the truth (issue 36): a new attempt counts as resumed only when every worker
confirmed the step it restored. Real runs of two local tasks running a small command-job script
through the shipped client library (`import tfconsole`); its checkpoint object writes the files
the console lists (ckpt-<S>.index and data) without TensorFlow, so each run takes seconds. Their
bytes are a real one-variable TensorFlow checkpoint's (made once with tf.train.Checkpoint.write):
restore reads each checkpoint with TensorFlow's reader before it stops anything (issue 47).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from backend.config.spec import job_from_dict
from backend.runs import launcher, restore
from backend.runs.launcher import Preflight
from backend.runs.store import RunStore
from backend.records.state import Phase

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = '''
import base64, sys, time
import tfconsole
from tfconsole import checkpoints

FILES = {"data-00000-of-00001": "AAAAAAAAAABT5rvL+goOCggIARIEc3RlcCoCCAEKQRI7Cg5WQVJJQUJMRV9WQUxVRRIIVmFyaWFibGUaH3N0ZXAvLkFUVFJJ"
                                "QlVURVMvVkFSSUFCTEVfVkFMVUUqAggB",
         "index": "AAAGCAEaAggBABwNX0NIRUNLUE9JTlRBQkxFX09CSkVDVF9HUkFQSAgHEgAgCChYNT3et2IAHwtzdGVwLy5BVFRSSUJVVEVT"
                  "L1ZBUklBQkxFX1ZBTFVFCAkSACgINSkDmAcAAAAAAQAAAABjuoqhAAAAAAEAAAAAwPKhsAABAnQAagAAAAABAAAAAEEwUSlv"
                  "CHwOAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAV/uAiyR1R9s="}


class Checkpoint:
    """The part of tf.train.Checkpoint the client library calls; the step is the only state."""
    class _Counter:
        def assign_add(self, n):
            pass
    save_counter = _Counter()
    step = 0

    def write(self, prefix):
        for suffix, data in FILES.items():
            with open(f"{prefix}.{suffix}", "wb") as fh:
                fh.write(base64.b64decode(data))
        return prefix

    def restore(self, prefix):
        self.step = int(prefix.rsplit("-", 1)[1])   # ckpt-<step>
        return self

    def expect_partial(self):
        return self


ckpt, ctx = Checkpoint(), tfconsole.context()
if sys.argv[1] == "honour" and ctx.resume_step:
    checkpoints.restore(ckpt, ctx.resume_step)   # what the docs ask: restore the given step
for step in range(ckpt.step + 1, 31):
    time.sleep(0.2)   # 6 s an attempt: restore sees its first steps, as with a real job
    tfconsole.report(step, loss=1.0 / step)
    if step % 10 == 0:
        ckpt.step = step
        checkpoints.save(ckpt, step, epoch=1, losses={ctx.task: 1.0 / step})
'''


def cli(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "backend", "--runs", str(runs), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def finished_run(cluster, python: str, tmp_path: Path, mode: str):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    job = job_from_dict({"kind": "command", "command": [python, str(script), mode]})
    run = launcher.launch(cluster, job, store=RunStore(tmp_path / "runs"), preflight=Preflight.SKIP)
    run.wait(timeout=60)
    assert run.state.phase == Phase.FINISHED
    return run


def test_restore_of_a_script_that_ignores_the_resume_step_says_so(local_cluster, python_path, tmp_path):
    run = finished_run(local_cluster, python_path, tmp_path, "ignore")
    runs = tmp_path / "runs"

    restored = cli("restore", run.run_id, "--step", "20", runs=runs)
    assert restored.returncode == 1, restored.stderr
    assert "attempt 2 started, NOT confirmed as resumed from step 20" in restored.stdout
    assert "attempt 2 is not confirmed as resumed from step 20" in restored.stderr
    assert "tfconsole.context().resume_step" in restored.stderr   # what the script must read
    assert "Traceback" not in restored.stderr

    run.wait(timeout=60)
    status = cli("status", run.run_id, runs=runs).stdout
    assert "warning: attempt 2 is not confirmed as resumed from step 20: worker-0, worker-1 did not " \
           "confirm restoring it" in status
    resume = json.loads(cli("status", run.run_id, "--json", runs=runs).stdout)["resume"]
    assert resume and resume[0].startswith("attempt 2 is not confirmed as resumed from step 20")


def test_restore_of_a_script_that_restores_the_step_is_reported_resumed(local_cluster, python_path, tmp_path):
    run = finished_run(local_cluster, python_path, tmp_path, "honour")

    result = restore.restore(run, 20)
    assert result.confirmed and result.resumed == {"worker-0": 20, "worker-1": 20}
    assert result.summary == "attempt 2 resumed: worker-0 from step 20, worker-1 from step 20"
    run.wait(timeout=60)
    status = cli("status", run.run_id, runs=tmp_path / "runs").stdout
    assert "attempt 2: from step 20" in status and "warning" not in status
