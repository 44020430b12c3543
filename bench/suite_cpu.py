"""Where a command's CPU goes, by kind of process: run the test suite under it to see what the
2 cores spend the suite's half hour on (issue 38).

Every 0.5 s it reads /proc for every process on the machine (the command's and everything it
starts, detached workers and sshd's children included), keeps each process's last CPU time
(user + system) and command line, and when the command ends prints the CPU-seconds per kind:
TensorFlow worker processes by script, Chromium, sshd, the console, the pytest processes
themselves. A process that lives under 0.5 s may be missed; its CPU is counted under "unseen".

    python bench/suite_cpu.py [--out FILE.jsonl] -- .venv/bin/python -m pytest -q -n 3 --dist loadgroup tests
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def sample() -> dict[tuple[str, str], tuple[str, float]]:
    """(pid, start time) -> (command line, CPU seconds so far) for every process with CPU."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2:].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            if cpu:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")[:300]
                found[(pid, fields[19])] = (cmd, cpu)
        except (OSError, ValueError, IndexError):
            pass   # gone between the listing and the read
    return found


def _spent(last: tuple[str, float], first: tuple[str, float] | None) -> tuple[str, float]:
    """A process's command line and the CPU seconds it spent while the command ran."""
    return last[0], last[1] - (first[1] if first else 0.0)


def kind(cmd: str) -> str:
    """A process's kind, from its command line."""
    argv = cmd.split()
    if not argv:
        return "unnamed"
    if "chrom" in argv[0]:
        return "chromium"
    if "sshd" in cmd:
        return "sshd"
    if "slurm" in argv[0] or "munge" in argv[0]:
        return "slurm and munge daemons"
    if len(argv) > 1 and argv[1].endswith(".py") and "pytest" not in os.path.basename(argv[1]):
        return "script: " + "/".join(argv[1].split("/")[-2:])     # harness/train.py, examples/...
    if len(argv) > 2 and argv[1] == "-m" and argv[2] != "pytest":
        return "module: " + " ".join(argv[2:4])                  # the CLI, streamlit, aftercare
    if "execnet" in cmd or re.search(r"-u -c\b", cmd):
        return "pytest-xdist workers (AppTest pages run here)"
    if "pytest" in cmd:
        return "pytest (and its children before exec)"
    return "other: " + os.path.basename(argv[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write each process's command line and CPU seconds here (JSON lines)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to run after --")
    with open("/proc/stat") as fh:
        busy0 = [int(v) for v in fh.readline().split()[1:]]
    base = sample()   # what the machine's older processes had spent before: not the command's
    t0 = time.time()
    proc = subprocess.Popen(command)
    seen: dict = {}
    done: list[tuple[str, float]] = []
    while True:
        now = sample()
        for key in set(seen) - set(now):
            done.append(_spent(seen.pop(key), base.get(key)))
        for key, (cmd, cpu) in now.items():   # a zombie's command line reads empty: keep the last one
            seen[key] = (cmd or seen.get(key, ("", 0.0))[0], cpu)
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    done += [_spent(last, base.get(key)) for key, last in seen.items()]
    wall = time.time() - t0
    with open("/proc/stat") as fh:
        busy1 = [int(v) for v in fh.readline().split()[1:]]
    idle = (busy1[3] + busy1[4]) - (busy0[3] + busy0[4])
    machine = (sum(busy1) - sum(busy0) - idle) / TICK
    by_kind, count = collections.Counter(), collections.Counter()
    done = [(cmd, cpu) for cmd, cpu in done if cpu > 0]
    for cmd, cpu in done:
        name = kind(cmd)
        by_kind[name] += cpu
        count[name] += 1
    if args.out:
        with open(args.out, "w") as fh:
            fh.writelines(json.dumps({"cmd": cmd, "cpu_s": cpu}) + "\n" for cmd, cpu in done)
    counted = sum(by_kind.values())
    print(f"\n{' '.join(command)[:100]}: exit {proc.returncode}, {wall:.0f} s wall; the machine's CPUs "
          f"busy {machine:.0f} CPU-s ({machine / wall / os.cpu_count():.0%} of {os.cpu_count()} cores); "
          f"counted per process {counted:.0f} CPU-s, unseen {max(0.0, machine - counted):.0f}")
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6}  kind")
    for name, cpu in by_kind.most_common(25):
        print(f"{cpu:8.0f} {cpu / counted:6.1%} {count[name]:6d}  {name}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
