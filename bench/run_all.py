"""Run every benchmark in this folder in turn (``make bench``); each prints its own table."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = [
    ["launch_scale.py"], ["many_tasks.py", "--rounds", "3"], ["project_launch.py", "--rounds", "3"],
    ["watch_latency.py"], ["watch_latency.py", "--ssh-loopback"],
    ["metrics_ingest.py"], ["figure_build.py"],
    ["watch_catchup.py", "--rounds", "3"], ["console_cpu.py", "--seconds", "30"], ["first_curves.py", "--rounds", "3"],
    ["harness_overhead.py", "--steps", "1500", "--rounds", "3"],
    ["export_during_training.py", "--rounds", "3"],
    ["slurm_submit.py", "--rounds", "3"],
    ["sweep_overhead.py", "--trials", "6", "--steps", "60", "--pace", "0.2"],
    ["cli_latency.py", "--rounds", "5"], ["goodput_cost.py"],
]

failed = 0
for args in RUNS:
    print(f"\n=== bench/{' '.join(args)}", flush=True)
    failed += subprocess.run([sys.executable, str(HERE / args[0]), *args[1:]], cwd=HERE.parent).returncode != 0
sys.exit(1 if failed else 0)
