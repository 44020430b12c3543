"""SIGTERM to one worker of a user's own tf_keras ``model.fit`` (examples/keras_fit.py, two local
workers under MultiWorkerMirroredStrategy, tfconsole.KerasCallback): both save the same step and
exit with the preempted status (issue 29 item 2). Today TensorFlow's notifier swallows SIGTERM."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.client.harness import ckpt_index, preempt
from tests.conftest import wait_for
from tests.harness.conftest import free_ports, read_metrics, ship, worker_env

ROOT = Path(__file__).resolve().parents[2]


def _run_folder(tmp_path: Path) -> Path:
    """A run folder as the launcher lays it out: RUN/lib/tfconsole/ and its entry."""
    run = tmp_path / "run"
    ship(str(run))
    (run / "logs").mkdir()
    return run


@pytest.mark.slow
def test_sigterm_to_one_fit_worker_saves_the_same_step_on_both(tmp_path):
    run = _run_folder(tmp_path)
    ports = free_ports(2)
    procs, logs = [], []
    try:
        for i in range(2):
            env = worker_env({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                              "task": {"type": "worker", "index": i}}, str(run / "tmp" / f"worker-{i}"))
            env.update({"TFCONSOLE_RUN_DIR": str(run), "TFCONSOLE_RUN_ID": "k",
                        "TFCONSOLE_TASK": f"worker-{i}", "TF_USE_LEGACY_KERAS": "1",
                        "PYTHONPATH": str(run / "lib")})
            log = run / "logs" / f"worker-{i}.log"
            with open(log, "w") as fh:
                procs.append(subprocess.Popen(
                    [sys.executable, str(ROOT / "examples" / "keras_fit.py"), "--epochs", "1",
                     "--steps", "100000", "--pace", "0.01"],
                    stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True))
            logs.append(log)
        wait_for(lambda: any(m["step"] >= 20 for m in read_metrics(str(run))), 180, "step 20")
        t0 = time.time()
        os.kill(procs[1].pid, signal.SIGTERM)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(timeout=90))
            except subprocess.TimeoutExpired:
                tails = "\n".join(log.read_text()[-1500:] for log in logs)
                raise AssertionError(f"a worker trained on after SIGTERM:\n{tails}")
        elapsed = time.time() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
    texts = [log.read_text() for log in logs]
    assert codes == [preempt.EXIT_CODE] * 2, "\n".join(t[-1500:] for t in texts)
    steps = set()
    for text in texts:
        line = next(ln for ln in text.splitlines() if "PREEMPTED: saved at step" in ln)
        steps.add(int(line.split("saved at step ")[1].split()[0]))
    assert len(steps) == 1, steps
    step = steps.pop()
    assert step % 10 == 0 and step < 100000
    chief = {c["step"] for c in ckpt_index.list_complete(str(run / "checkpoints"))}
    other = {c["step"] for c in ckpt_index.list_complete(str(run / "worker_checkpoints" / "worker-1"))}
    assert step in chief and step in other
    for task in ("worker-0", "worker-1"):
        record = json.loads((run / "tasks" / f"{task}.preempted").read_text())
        assert record["step"] == step and record["within_grace"], record
    assert "epoch losses" not in texts[0]   # fit did not run on to its end as if finished
    print(f"fit: both saved step {step}; signal to both exited {elapsed:.1f}s")
