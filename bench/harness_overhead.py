"""Harness overhead: steps/s of the full harness against the same loop with no instrumentation.

Runs examples/synthetic.py on two local worker processes (TF_CONFIG on localhost ports), in
interleaved rounds so that load from other processes on the machine hits every variant alike:

  bare     --param bare=1: the same tf.function step, no gather, no metrics, no checkpoints
  metrics  the metrics row in the sync step's gradient all-reduce + metrics.jsonl +
           TensorBoard + progress line every log_every steps, input-wait timing every step,
           the first batch's hash, one checkpoint at the end (checkpoint_every=0)
  full     the harness defaults: metrics as above + a checkpoint every 50 steps

steps/s is the harness's own figure (HARNESS DONE line): steps after the first (tracing) step
divided by the loop's wall time, so start-up is excluded and every in-loop cost is included.

    .venv/bin/python bench/harness_overhead.py [--steps 3000] [--rounds 3]
"""
import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rig.sshd import free_port  # noqa: E402  (below the ephemeral range)
TRAIN = ["-m", "backend.client.harness.train"]
JOB = os.path.join(ROOT, "examples", "synthetic.py")
VARIANTS = {
    "bare": ["bare=1"],
    "metrics": ["checkpoint_every=0"],
    "full": [],
}


def run_once(steps: int, params: list, workdir: str, threads: int) -> tuple[float, float]:
    """Start two workers, wait; return the slower worker's steps/s (synchronous training
    makes them equal) and the two workers' CPU ms per step, summed."""
    run = tempfile.mkdtemp(dir=workdir)
    ports = [free_port(), free_port()]
    procs = []
    for i in range(2):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                         "task": {"type": "worker", "index": i}}))
        argv = [sys.executable, *TRAIN, "--run-dir", run, "--job", JOB, "--run-id", "bench",
                "--param", "epochs=1", "--param", f"steps_per_epoch={steps}"]
        for kv in params:
            argv += ["--param", kv]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env, start_new_session=True))
    rates, cpu = [], []
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        tails = "\n".join(f"--- worker-{i} exit {p.returncode}\n" + "\n".join(o.splitlines()[-6:])
                          for i, (p, o) in enumerate(zip(procs, outs)))
        raise RuntimeError(f"a worker failed:\n{tails}")
    for out in outs:
        done = [ln for ln in out.splitlines() if "HARNESS DONE" in ln]
        summary = ast.literal_eval(done[-1].split("HARNESS DONE ", 1)[1])
        rates.append(summary["steps_per_sec"])
        cpu.append(summary["cpu_ms_per_step"])
    return min(rates), sum(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="TF intra-op threads per worker")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to every variant, e.g. hidden=512 or log_every=50")
    args = ap.parse_args()
    results = {name: [] for name in VARIANTS}
    cpu = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as workdir:
        for r in range(args.rounds):
            for name, params in VARIANTS.items():
                for tries in (1, 2, 3):   # a shared machine can fail to start a thread
                    try:
                        rate, ms = run_once(args.steps, args.param + params, workdir,
                                            args.threads)
                        break
                    except RuntimeError as exc:
                        print(f"round {r + 1} {name}: {exc}\n(retrying)", flush=True)
                else:
                    raise SystemExit("three failed attempts in a row")
                results[name].append(rate)
                cpu[name].append(ms)
                print(f"round {r + 1} {name:8s} {rate:8.1f} steps/s {ms:7.3f} CPU ms/step  "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
    base = statistics.median(results["bare"])
    cbase = statistics.median(cpu["bare"])
    print(f"\n{'variant':8s} {'steps/s':>9s} {'wall overhead':>14s} {'CPU ms/step':>12s} "
          f"{'CPU overhead':>13s}  (medians of {args.rounds} rounds; 2 workers)")
    for name in VARIANTS:
        med, cmed = statistics.median(results[name]), statistics.median(cpu[name])
        print(f"{name:8s} {med:9.1f} {100 * (1 - med / base):13.1f}% {cmed:12.3f} "
              f"{100 * (cmed / cbase - 1):12.1f}%")
    # Paired: each round's variant against the bare run next to it (same minute, same load),
    # steadier than the ratio of medians where the machine's speed drifts between rounds.
    print("\npaired, median over rounds of (1 - variant/bare in that round):")
    for name in VARIANTS:
        if name != "bare":
            pairs = [100 * (1 - v / b) for v, b in zip(results[name], results["bare"])]
            cpairs = [100 * (c / b - 1) for c, b in zip(cpu[name], cpu["bare"])]
            print(f"{name:8s} wall {statistics.median(pairs):5.1f}%  CPU {statistics.median(cpairs):5.1f}%"
                  f"  (wall per round: {', '.join(f'{p:.1f}' for p in pairs)})")


if __name__ == "__main__":
    main()
