"""Launch and stop at 32 tasks vs 2 tasks, side by side in one run (issue 37).

Real sshd servers on loopback addresses (127.0.0.2 ... 127.0.0.9). The 2-task run puts one task on
each of two hosts; the 32-task run puts four tasks on each of eight hosts. The job is light (a
`kind: command` Python one-liner that prints and sleeps; no TensorFlow), so the figures are the
console's and the hosts' own costs, not training's. Rounds alternate 2, 32, 2, 32, ...

- launch: ``launcher.launch`` end to end as a script calls it, preflight included (the fixed
  ``START_CHECK_S`` "did it die at once" wait too, the same in both); preflight alone beside it.
- stop: ``python -m backend stop RUN`` (what ``tfconsole stop`` runs) from start to exit, and
  when the last of the job's processes was gone (a thread reads /proc every 20 ms for a token
  only the job's environment carries). After each stop, ps must find nothing of the job. Its
  CPU seconds (the command's own, start-up included) beside: the figure that a loaded machine
  distorts least.

    .venv/bin/python bench/many_tasks.py [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend import engines  # noqa: E402
from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from rig.hosts import start_hosts  # noqa: E402
from rig import sshd  # noqa: E402

JOB = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
SHAPES = {2: (2, 1), 32: (8, 4)}   # tasks -> (hosts, tasks per host)


def carrying(token: str) -> list[int]:
    """Live processes whose environment holds TOKEN=<token>."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"TOKEN={token}".encode() in f.read():
                    with open(f"/proc/{entry}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            continue
    return found


def cluster_for(hosts, key, root: Path, tasks: int):
    count, per_host = SHAPES[tasks]
    return cluster_from_dict({"tasks": [
        {"role": "worker", "host": h.address, "ssh_port": h.port, "tf_port": sshd.free_port(),
         "identity_file": str(key), "python": sys.executable, "workdir": str(root / "work")}
        for h in hosts[:count] for _ in range(per_host)]})


class Timed:
    """Wraps a module function and adds up the seconds spent in it."""

    def __init__(self, module, name: str) -> None:
        self.module, self.name, self.inner, self.seconds = module, name, getattr(module, name), 0.0
        setattr(module, name, self)

    def __call__(self, *args, **kw):
        start = time.perf_counter()
        try:
            return self.inner(*args, **kw)
        finally:
            self.seconds += time.perf_counter() - start


def one_round(hosts, key, options, root: Path, tasks: int, known: Path) -> dict:
    token = uuid.uuid4().hex
    job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", JOB], "env": {"TOKEN": token}})
    store = RunStore(root / "runs")
    preflight = Timed(engines, "require_preflight")
    start = time.perf_counter()
    try:
        run = launcher.launch(cluster_for(hosts, key, root, tasks), job, store=store, options=options)
    finally:
        setattr(engines, "require_preflight", preflight.inner)
    launched = time.perf_counter() - start
    shown = [s.state for s in run.status()]
    assert shown == ["running"] * tasks, shown
    run.pool.close()
    gone_at: list[float] = []

    def watch(t0: float) -> None:
        while carrying(token):
            time.sleep(0.02)
        gone_at.append(time.perf_counter() - t0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    watcher = threading.Thread(target=watch, args=(t0,), daemon=True)
    watcher.start()
    cli = subprocess.run([sys.executable, "-m", "backend", "--runs", str(store.root), "--known-hosts",
                          str(known), "--ssh-config", str(root / "none"), "stop", run.run_id],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    stopped = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    watcher.join(60)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    left = carrying(token)
    assert not left, f"left after stop: {left}"
    return {"launch": launched, "preflight": preflight.seconds, "stop": stopped,
            "gone": gone_at[0] if gone_at else float("nan"), "stop_cpu": cpu}


def _list(rounds: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.2f}" for r in rounds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts, key, options = start_hosts(root, max(h for h, _ in SHAPES.values()))
        known = root / "known_hosts"
        results: dict[int, list[dict]] = {n: [] for n in SHAPES}
        loads = [os.getloadavg()[0]]
        try:
            for r in range(a.rounds):
                for n in SHAPES:
                    results[n].append(one_round(hosts, key, options, root, n, known))
                    loads.append(os.getloadavg()[0])
                    print(f"round {r + 1}, {n:>2} tasks: " + ", ".join(
                        f"{k} {v:.2f} s" for k, v in results[n][-1].items()) + f" (load {loads[-1]:.1f})",
                          flush=True)
        finally:
            for h in hosts:
                h.stop()
    print(f"\nload average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    print(f"{'tasks':>5} {'launch s':>9} {'preflight s':>12} {'stop s':>7} {'all gone s':>11} "
          f"{'stop CPU s':>11}   (medians; rounds)")
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in results.items()}
    for n, rs in results.items():
        m = med[n]
        print(f"{n:>5} {m['launch']:>9.2f} {m['preflight']:>12.2f} {m['stop']:>7.2f} {m['gone']:>11.2f} "
              f"{m['stop_cpu']:>11.2f}   "
              f"stop {_list(rs, 'stop')}; launch {_list(rs, 'launch')}")
    small, big = med[min(SHAPES)], med[max(SHAPES)]
    print(f"32 / 2 tasks: launch {big['launch'] / small['launch']:.2f}x, stop {big['stop'] / small['stop']:.2f}x")


if __name__ == "__main__":
    main()
