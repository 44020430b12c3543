"""What an export costs the training it runs beside: the training's steps/s with no export, during
an export with the exporter's defaults (1 TensorFlow thread per pool, nice +10), and during one
with TensorFlow's own defaults (pools as wide as the machine, same priority as the training).

Two local worker processes train examples/synthetic.py with a checkpoint every 50 steps; each
round measures, one after another, a quiet window as long as the last export took, an export with
``--threads 1 --nice 10`` and one with ``--threads 0 --nice 0``, always of the latest checkpoint.
steps/s is read from the chief's metrics.jsonl (its step at the window's start and end).

    .venv/bin/python bench/export_during_training.py [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rig.sshd import free_port  # noqa: E402  (below the ephemeral range)
HARNESS = [sys.executable, "-m", "backend.client.harness.{}"]   # this checkout's, as the venv imports it
JOB = os.path.join(ROOT, "examples", "synthetic.py")
VARIANTS = {"small pools, nice 10 (default)": ["--threads", "1", "--nice", "10"],
            "TensorFlow defaults": ["--threads", "0", "--nice", "0"]}


def start_workers(run: str) -> list[subprocess.Popen]:
    ports = [free_port(), free_port()]
    os.makedirs(os.path.join(run, "logs"), exist_ok=True)
    procs = []
    for i in range(2):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                         "task": {"type": "worker", "index": i}}))
        argv = [*(a.format("train") for a in HARNESS), "--run-dir", run, "--job", JOB,
                "--run-id", "bench", "--param", "epochs=1", "--param", "steps_per_epoch=10000000",
                "--param", "checkpoint_every=50", "--param", "keep_checkpoints=3"]
        with open(os.path.join(run, "logs", f"worker-{i}.log"), "w") as log:
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def last_step(run: str) -> int:
    try:
        with open(os.path.join(run, "metrics.jsonl"), "rb") as fh:
            fh.seek(max(0, os.path.getsize(fh.name) - 4096))
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (OSError, ValueError, IndexError):
        return 0


def rate(run: str, action) -> tuple[float, float]:
    """steps/s of the training while ``action()`` runs, and how long it ran."""
    s0, t0 = last_step(run), time.time()
    action()
    s1, t1 = last_step(run), time.time()
    return (s1 - s0) / (t1 - t0), t1 - t0


def export(run: str, args: list[str], name: str) -> None:
    out = subprocess.run([*(a.format("export") for a in HARNESS), "--run-dir", run, "--job", JOB,
                          "--formats", "keras", "--name", name, *args],
                         capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if out.returncode != 0:
        raise SystemExit(f"export failed: {out.stderr[-2000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    run = tempfile.mkdtemp(prefix="bench-export-")
    procs = start_workers(run)
    try:
        deadline = time.time() + 300
        while last_step(run) < 200 and time.time() < deadline:
            time.sleep(1)
        results = {"no export": [], **{k: [] for k in VARIANTS}}
        took = {k: [] for k in VARIANTS}
        quiet_s = 20.0
        for r in range(a.rounds):
            results["no export"].append(rate(run, lambda: time.sleep(quiet_s))[0])
            for label, args in VARIANTS.items():
                steps_s, seconds = rate(run, lambda: export(run, args, f"r{r}-{len(took[label])}-{args[1]}"))
                results[label].append(steps_s)
                took[label].append(seconds)
                quiet_s = seconds
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in results.items()), flush=True)
        base = statistics.median(results["no export"])
        print(f"\n{'training during':<32}{'steps/s (median)':>18}{'vs no export':>14}{'export s':>10}")
        for label, values in results.items():
            secs = f"{statistics.median(took[label]):.1f}" if label in took else "-"
            print(f"{label:<32}{statistics.median(values):>18.0f}{statistics.median(values) / base:>13.0%}{secs:>10}")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()


if __name__ == "__main__":
    main()
