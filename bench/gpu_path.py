"""The GPU path on a machine with a GPU: per-task CUDA_VISIBLE_DEVICES and the live GPU watch.

Launches a real two-task run through ``backend.runs.launcher.launch`` on this machine: task 0 is given
GPU 0, task 1 no GPU (an empty list). Each task reports what it was told and how many GPUs it can
see, and a task that sees one keeps it busy for ``--seconds`` with matrix products. Meanwhile a
real ``RunMonitor`` (watch agent on the chief, ``nvidia-smi`` sampled with each heartbeat) collects
GPU readings, which are drawn with the console's own ``figures.gpu_figure``.

The job is a ``command`` job using PyTorch as the GPU load, not TensorFlow: the GPU machine this
was written for has no TensorFlow and no CUDA 12 libraries (TensorFlow 2.21 needs them), and no
network to fetch them. What it checks is what the console controls: which GPUs each task is told
to use, and what the watch shows of them.

    python bench/gpu_path.py [--seconds 20] [--out DIR]

Prints a JSON report; with ``--out`` it also writes ``gpu_report.json``, ``gpu_util.html`` and
``gpu_mem.html`` there. Exit code 0 when every check holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.client.harness.probe import check_gpus  # noqa: E402
from backend.runs.launcher import Preflight, launch  # noqa: E402
from backend.watch.metrics import MetricsStore  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from console import figures  # noqa: E402
from rig.sshd import free_port  # noqa: E402

TASK_CODE = """\
import json, os, sys, time
seconds = float(sys.argv[1])
try:
    import torch
    seen = torch.cuda.device_count()
except ImportError:
    torch, seen = None, 0
print(json.dumps({"task": os.environ["TFCONSOLE_TASK"],
                  "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "gpus_seen": seen}), flush=True)
end = time.time() + seconds
if seen:
    hold = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")   # 4 GiB the watch should see
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.time() < end:
        for _ in range(20):
            b = a @ a
        torch.cuda.synchronize()
else:
    time.sleep(seconds)
print("done", flush=True)
"""


def first_json_line(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long task 0 loads its GPU")
    parser.add_argument("--out", type=Path, help="folder for the report and the two GPU charts")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="gpu-path-"))
    tasks = [{"role": "worker", "host": "127.0.0.1", "transport": "local", "python": sys.executable,
              "tf_port": free_port(), "workdir": str(tmp / "work"), "gpus": gpus}
             for gpus in ([0], [])]
    job = job_from_dict({"kind": "command",
                         "command": [sys.executable, "-c", TASK_CODE, str(args.seconds)]})
    preflight_gpus = check_gpus()
    run = launch(cluster_from_dict({"tasks": tasks}), job, store=RunStore(tmp / "runs"),
                 preflight=Preflight.SKIP)
    monitor = run.monitor(MetricsStore()).start()
    try:
        statuses = run.wait(timeout=args.seconds + 120)
        # The last heartbeats after the load ended show the memory given back.
        time.sleep(3)
        samples = monitor.gpu()
    finally:
        monitor.stop()
    told = {t.name: first_json_line(run.log_tail(t.name)) for t in run.state.tasks}
    readings = [(t, g) for host in samples.values() for t, gpus in host for g in gpus]
    util = [g["util"] for _, g in readings if g["util"] is not None]
    mem = [g["mem_used_mib"] for _, g in readings if g["mem_used_mib"] is not None]
    names = [t.name for t in run.state.tasks]
    checks = {
        "task 0 told CUDA_VISIBLE_DEVICES=0 and sees 1 GPU":
            told[names[0]].get("cuda_visible_devices") == "0" and told[names[0]].get("gpus_seen") == 1,
        "task 1 told CUDA_VISIBLE_DEVICES='' and sees no GPU":
            told[names[1]].get("cuda_visible_devices") == "" and told[names[1]].get("gpus_seen") == 0,
        "both tasks exited 0": [s.exit_code for s in statuses] == [0, 0],
        "the watch got GPU readings": bool(readings),
        "the watch saw the load (utilisation over 50%)": bool(util) and max(util) > 50,
        "the watch saw the 4 GiB held (memory rose by over 4000 MiB)":
            bool(mem) and max(mem) - min(mem) > 4000,
    }
    report = {"preflight_gpus": preflight_gpus, "tasks": told, "phase": run.state.phase.value,
              "samples": len(readings),
              "span_s": round(readings[-1][0] - readings[0][0], 1) if readings else 0,
              "util_max": max(util, default=None), "mem_used_mib_min": min(mem, default=None),
              "mem_used_mib_max": max(mem, default=None), "checks": checks}
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_report.json").write_text(json.dumps(report, indent=2))
        figures.gpu_figure(samples).write_html(args.out / "gpu_util.html", include_plotlyjs="cdn")
        figures.gpu_figure(samples, "mem_used_mib", title="GPU memory used", y_title="MiB").write_html(
            args.out / "gpu_mem.html", include_plotlyjs="cdn")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
