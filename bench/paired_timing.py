"""Paired timing inside two local workers: what a tfconsole client part costs a training loop.

Shared by bench/custom_loop.py and bench/keras_callback.py. Each starts two worker processes
(TF_CONFIG by hand on localhost ports, a throwaway run folder holding lib/tfconsole (client and harness)
as a console run has them) running its own ``worker`` script, which times segments without and
with the part under test, alternating in ABBA order inside the same processes, and prints one
``SEG <pair> <use 0|1> <wall ms/step> <CPU ms/step>`` line per segment. A load change on shared
cores then hits both variants of a pair alike, and start-up is not measured. The figure is the
median over pairs of (with / without - 1), wall of the slower worker and CPU summed.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rig.sshd import free_port  # noqa: E402  (the workers' ports, below the ephemeral range)


def run(worker: str, argv: list[str], run_dir: str) -> dict:
    """{(pair, use): (wall ms/step of the slower worker, CPU ms/step summed over workers)}."""
    ports = [free_port(), free_port()]
    procs = []
    for i in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
               "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                        "task": {"type": "worker", "index": i}}),
               "PYTHONPATH": str(Path(run_dir) / "lib"),
               "TFCONSOLE_RUN_DIR": run_dir, "TFCONSOLE_RUN_ID": "bench", "TFCONSOLE_ATTEMPT": "1",
               "TFCONSOLE_TASK": f"worker-{i}", "TFCONSOLE_IS_CHIEF": "1" if i == 0 else "0"}
        procs.append(subprocess.Popen([sys.executable, "-c", worker, *argv],
                                      env=env, text=True, stdout=subprocess.PIPE))
    segs: dict = {}
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        assert p.returncode == 0, f"a worker failed (exit {p.returncode})"
        for line in out.splitlines():
            if line.startswith("SEG"):
                _, i, use, ms, cpu = line.split()
                old = segs.get((int(i), int(use)), (0.0, 0.0))
                segs[(int(i), int(use))] = (max(old[0], float(ms)), old[1] + float(cpu))
    return segs


def measure(worker: str, argv: list[str], *, pairs: int, variant: str) -> dict:
    """Run the two workers in a throwaway run folder and sum their segments up: the machine's
    load before and after, ms per step of each pair's two segments (``ms_per_step_none``,
    ``ms_per_step_<variant>``) and the cost in per cent, per pair and its median."""
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lib").mkdir()
        (Path(tmp) / "lib" / "tfconsole").symlink_to(ROOT / "backend" / "client")
        segs = run(worker, argv, tmp)
    each = range(pairs)
    wall = [100 * (segs[(i, 1)][0] / segs[(i, 0)][0] - 1) for i in each]
    cpu = [100 * (segs[(i, 1)][1] / segs[(i, 0)][1] - 1) for i in each]
    return {
        "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
        "ms_per_step_none": [round(segs[(i, 0)][0], 2) for i in each],
        f"ms_per_step_{variant}": [round(segs[(i, 1)][0], 2) for i in each],
        "median_ms_none": round(statistics.median(segs[(i, 0)][0] for i in each), 2),
        "cost_pct_wall_median": round(statistics.median(wall), 1),
        "cost_pct_wall_per_pair": [round(x, 1) for x in wall],
        "cost_pct_cpu_median": round(statistics.median(cpu), 1)}
