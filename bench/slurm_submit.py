"""Submit -> first loss point: the same two-worker job through Slurm and started directly.

``python bench/slurm_submit.py [--rounds 3]`` (root, Slurm and munge installed: ``make test``
installs them). It starts the one-node test cluster of tests/slurm.py, then alternates the two
paths round by round so both see the same machine load:

- slurm: ``launcher.launch`` of a ``kind: slurm`` cluster (local login host): unpack + sbatch,
  Slurm schedules the job, srun starts both tasks, each builds TF_CONFIG and starts the harness;
- local: ``launcher.launch`` of two local workers (the SSH-free path): the same harness, started
  by our own supervisor.

Preflight is skipped on the local path (Slurm has none): the figure is launch to the chief's first
metrics row (step 1: log_every=1), which needs TensorFlow imported and MultiWorkerMirroredStrategy
connected on both workers. Each run is stopped once its first row is there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.slurm_spec import slurm_from_dict  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from tests import slurm, sshd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARAMS = {"epochs": 1, "steps_per_epoch": 100000, "log_every": 1, "checkpoint_every": 0}
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def clusters(folder: Path):
    python = sys.executable
    yield "slurm", lambda: slurm_from_dict({
        "kind": "slurm", "host": "localhost", "transport": "local", "partition": slurm.PARTITION,
        "tasks_per_node": 2, "time_limit": "10", "python": python, "workdir": str(folder / "slurm"),
        "tf_port": sshd.free_port()})
    yield "local", lambda: cluster_from_dict({"tasks": [
        {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": sshd.free_port(),
         "python": python, "workdir": str(folder / "local")} for _ in range(2)]})


def first_loss_s(cluster, job, store: RunStore) -> float:
    t0 = time.time()
    run = launcher.launch(cluster, job, store=store, preflight=launcher.Preflight.SKIP)
    metrics = Path(run.state.chief.remote_run_dir) / "metrics.jsonl"
    try:
        while not (metrics.exists() and metrics.read_text().strip()):
            if time.time() - t0 > 600:
                raise RuntimeError(f"no loss after 600 s: {run.status()}")
            time.sleep(0.05)
        return time.time() - t0
    finally:
        run.stop(grace_s=3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    lacking = slurm.missing()
    if lacking:
        print(f"cannot start the test cluster, missing: {', '.join(lacking)} (run `make test` first)")
        return 1
    cluster_slurm = slurm.start()
    os.environ["SLURM_CONF"] = cluster_slurm.env["SLURM_CONF"]
    folder = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    job = job_from_dict({"kind": "harness", "module": str(ROOT / "examples" / "synthetic.py"),
                         "params": PARAMS, "env": TF_ENV})
    store = RunStore(folder / "runs")
    times: dict[str, list[float]] = {"slurm": [], "local": []}
    try:
        for _ in range(a.rounds):
            for name, make in clusters(folder):
                times[name].append(first_loss_s(make(), job, store))
                print(f"{name:<6} {times[name][-1]:6.2f} s", flush=True)
    finally:
        cluster_slurm.stop()
    print("\npath   median s  min s  max s   rounds: submit -> first loss point (2 workers)")
    for name, values in times.items():
        print(f"{name:<6} {statistics.median(values):8.2f} {min(values):6.2f} {max(values):6.2f}   "
              + " ".join(f"{v:.2f}" for v in values))
    print(json.dumps({k: [round(v, 2) for v in vs] for k, vs in times.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
