"""A worker's start-up CPU: two harness workers of the default demo job, this tree against another.

Each round starts two local workers (examples/synthetic.py, TF_CONFIG by hand on localhost ports)
of this tree's backend/client/harness and, right after, two of ``--tree``'s, and counts the CPU seconds
(user + system) the two processes spent from start to exit. Few steps, so the figure is what a
worker spends before it trains (the import, the strategy, the model, tracing): what the suite's
two hundred short runs pay (issue 38). Rounds alternate which tree goes first; the figure is the
median over rounds of the per-worker difference, load stated.

    .venv/bin/python bench/worker_cpu.py --tree /tmp/old-tree [--rounds 5] [--steps 50]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rig.sshd import free_port  # noqa: E402  (below the ephemeral range)


def _train(tree: Path) -> list[str]:
    """The harness of ``tree``: a package (``-m``, run from the tree) or, in an older tree, a script."""
    if (tree / "backend" / "client" / "harness" / "train.py").exists():
        return [sys.executable, "-c", "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
                "runpy.run_module('backend.client.harness.train', run_name='__main__')", str(tree)]
    return [sys.executable, str(tree / "backend" / "harness" / "train.py")]


def two_workers(tree: Path, steps: int, workdir: str) -> float:
    """CPU seconds per worker of one two-worker run of ``tree``'s harness."""
    ports = [free_port(), free_port()]
    run = tempfile.mkdtemp(dir=workdir)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs = []
    for i in range(2):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_CONFIG=json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                         "task": {"type": "worker", "index": i}}))
        procs.append(subprocess.Popen(
            [*_train(tree), "--run-dir", run,
             "--job", str(ROOT / "examples" / "synthetic.py"), "--run-id", "bench",
             "--param", "epochs=1", "--param", f"steps_per_epoch={steps}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    errors = [p.communicate(timeout=600)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{tree}: a worker failed:\n" + "\n".join(e[-1500:] for e in errors))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return spent / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True,
                    help="another checkout to compare with (git worktree add /tmp/old-tree REV)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    trees = {"this": ROOT, "other": args.tree.resolve()}
    spent: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="worker-cpu-") as workdir:
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                spent[name].append(two_workers(trees[name], args.steps, workdir))
            print(f"round {r + 1}: this {spent['this'][-1]:.2f}  other {spent['other'][-1]:.2f} "
                  f"CPU-s a worker  (load {os.getloadavg()[0]:.1f})", flush=True)
    diffs = [o - t for t, o in zip(spent["this"], spent["other"])]
    print(f"\nmedian CPU-s a worker over {args.rounds} rounds: this "
          f"{statistics.median(spent['this']):.2f}, other {statistics.median(spent['other']):.2f}; "
          f"this spends {statistics.median(diffs):.2f} less (paired median)")


if __name__ == "__main__":
    main()
