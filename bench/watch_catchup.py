"""Watch-agent catch-up: a console attaching to a run whose metrics.jsonl already holds
1,000,000 lines (64 workers x 15,625 steps, 225 MiB), until every record is in its store.

Measured, each ``--rounds`` times (median printed):
  agent:  the watch agent (harness/watch.py) alone, its events read from the pipe and thrown away, until the offsets
          event that reaches the end of the file (the chief's share of the work);
  e2e:    the agent -> pipe -> RunMonitor (journal mirror + parse + store), until the store holds
          every record (what a user waits for).
``--profile`` prints the console side's top functions (cProfile) for one e2e round.

    python bench/watch_catchup.py [--workers 64] [--steps 15625] [--rounds 3] [--profile]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.watch.metrics import MetricsStore  # noqa: E402
from backend.watch import local_agent  # noqa: E402
from bench.metrics_ingest import lines  # noqa: E402


def write_run(data: list[bytes]) -> Path:
    from rig.watch_run import make_run
    tmp = Path(tempfile.mkdtemp(prefix="catchup-bench-"))
    run = make_run(tmp / "run")
    (run / "metrics.jsonl").write_bytes(b"\n".join(data) + b"\n")
    return run


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def agent_only(run: Path) -> tuple[float, float]:
    """(wall s, the agent's CPU s) until it has sent the whole file."""
    size = (run / "metrics.jsonl").stat().st_size
    t0 = time.perf_counter()
    proc = subprocess.Popen([*local_agent(), "--run-dir", str(run)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for line in proc.stdout:
        if line.startswith(b'{"type":"offsets"'):
            if json.loads(line)["offsets"].get("metrics.jsonl", {}).get("offset") == size:
                break
    took, cpu = time.perf_counter() - t0, cpu_of(proc.pid)
    proc.stdin.close()
    proc.terminate()
    proc.wait()
    return took, cpu


def e2e(run: Path, want: int) -> tuple[float, float]:
    """(wall s, CPU s of this process: the console side) until the store holds every record."""
    from backend.hosts.local import LocalTransport
    from backend.watch import RunMonitor
    local = Path(tempfile.mkdtemp(prefix="catchup-local-"))
    store = MetricsStore()
    t0, c0 = time.perf_counter(), time.process_time()
    mon = RunMonitor(LocalTransport, str(run), str(local), store, python=sys.executable).start()
    while sum(len(store.series(t)) for t in store.tasks()) < want:
        time.sleep(0.05)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    mon.stop()
    return took, cpu


def profile_monitor(run: Path, want: int) -> None:
    """cProfile inside the monitor's own thread (a profiler sees only the thread it runs in)."""
    import cProfile
    import pstats
    from backend.watch import RunMonitor
    profiles = []
    loop = RunMonitor._loop

    def profiled(self) -> None:
        prof = cProfile.Profile()
        prof.enable()
        try:
            loop(self)
        finally:
            prof.disable()
            profiles.append(prof)
    RunMonitor._loop = profiled
    e2e(run, want)
    pstats.Stats(profiles[0]).sort_stats("tottime").print_stats(14)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--steps", type=int, default=15_625)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    data = lines(args.workers, args.steps)
    run = write_run(data)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{len(data):,} lines, {sum(map(len, data)) / 2**20:.0f} MiB")
    if args.profile:
        profile_monitor(run, len(data))
        return
    for name, fn in (("agent alone", agent_only), ("agent -> monitor -> store", lambda r: e2e(r, len(data)))):
        rounds = [fn(run) for _ in range(args.rounds)]
        walls, cpus = [r[0] for r in rounds], [r[1] for r in rounds]
        print(f"{name}: wall median {statistics.median(walls):.2f} s, CPU median {statistics.median(cpus):.2f} s "
              f"({'agent' if name == 'agent alone' else 'console process'}); "
              f"rounds {', '.join(f'{w:.2f}/{c:.2f}' for w, c in rounds)}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
