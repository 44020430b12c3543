"""Launch time on 1, 4 and 16 loopback SSH hosts: parallel launch vs a sequential loop.

Each host is a real sshd on its own loopback address (127.0.0.2, 127.0.0.3, ...). The job is
`sleep 30` so the figure is the launcher's own cost: copy the harness, start each task through
the per-host supervisor, record pids. Preflight is skipped (it then imported TensorFlow on every host,
which measures the CPU, not the launcher) and so is the fixed 3 s "did it die at once" check.

    .venv/bin/python bench/launch_scale.py [--sizes 1,4,16] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.engines import direct as hosts_engine  # noqa: E402
from backend.runs import launcher  # noqa: E402
from backend.hosts import pool as pool_module  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from rig import sshd  # noqa: E402
from rig.hosts import start_hosts  # noqa: E402


def machine_cpu_s() -> float:
    """CPU seconds used by every process on this machine so far (sshd, Pythons, us): /proc/stat."""
    fields = open("/proc/stat").readline().split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # all but idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def one_launch(hosts, key, options, root: Path, workers: int) -> float:
    cluster = cluster_from_dict({"tasks": [
        {"role": "worker", "host": h.address, "ssh_port": h.port, "tf_port": sshd.free_port(),
         "identity_file": str(key), "python": sys.executable, "workdir": str(root / "work")}
        for h in hosts]})
    job = job_from_dict({"kind": "command", "command": ["sleep", "30"]})
    pool_module.MAX_PARALLEL = workers
    start = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    machine = machine_cpu_s()
    run = launcher.launch(cluster, job, store=RunStore(root / "runs"), options=options,
                          preflight=launcher.Preflight.SKIP)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    all_cpu = machine_cpu_s() - machine
    run.stop(grace_s=2)
    run.pool.close()
    return took, client_cpu, all_cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,4,16")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    hosts_engine.START_CHECK_S = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts, key, options = start_hosts(root, max(sizes))
        try:
            rows = []
            for n in sizes:
                par = [one_launch(hosts[:n], key, options, root, 64) for _ in range(a.repeat)]
                seq = [one_launch(hosts[:n], key, options, root, 1) for _ in range(a.repeat)]
                rows.append((n, statistics.median(p[0] for p in par), statistics.median(s[0] for s in seq),
                             statistics.median(p[1] for p in par), statistics.median(p[2] for p in par)))
        finally:
            for h in hosts:
                h.stop()
    base = rows[0][1]
    print(f"{'hosts':>5} {'parallel s':>11} {'sequential s':>13} {'parallel / 1 host':>18} "
          f"{'launcher CPU s':>15} {'all CPU s':>10}")
    for n, par, seq, cpu, total in rows:
        print(f"{n:>5} {par:>11.2f} {seq:>13.2f} {par / base:>18.2f} {cpu:>15.2f} {total:>10.2f}")


if __name__ == "__main__":
    main()
