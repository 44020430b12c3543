"""How long a read command takes, as a whole process (issue 57 item 7): this tree vs another.

Times `python -m backend --help`, `runs`, `status RUN`, `sweep status` and `sweep status SWEEP`
from the process's start to its exit, start-up and imports included, on a runs folder made here
with one finished run (a record only, its task on 127.0.0.1 over the local transport: status
asks it once) and one finished sweep whose Optuna study holds a few trials. Each round runs every
command in both trees, alternating which goes first (A B, then B A), so a load change hits both
alike. Prints min / median / max wall seconds and the median CPU seconds (user + system).

    .venv/bin/python bench/cli_latency.py --tree /tmp/cli-before --rounds 7

(``--tree``: a checkout of the commit to compare, e.g. ``git worktree add --detach /tmp/cli-before
BASE``; both trees run with this interpreter, and the runs folder is made with this tree's code.
Without it, this tree alone, as `make bench` runs it.)
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUN, SWEEP = "bench-run", "sweep-bench"
COMMANDS = (["--help"], ["runs"], ["status", RUN], ["sweep", "status"], ["sweep", "status", SWEEP])
LOCAL = {"role": "worker", "host": "127.0.0.1", "transport": "local", "tf_port": 2000}


def make_runs(root: Path) -> None:
    """One finished run's record and one finished sweep with 4 trials in its Optuna study."""
    import json
    from backend.config.yaml_files import write_yaml
    from backend.records.state import Attempt, Phase, RunState, TaskState
    from backend.runs.store import RunStore
    from backend.sweeps import control, study
    from backend.sweeps.spec import sweep_from_dict
    store = RunStore(root)
    store.reserve(RUN)
    store.save(RunState(RUN, 1000.0, {"tasks": [LOCAL]}, {"kind": "command", "command": ["true"]},
                        [TaskState("worker-0", 0, "127.0.0.1", str(root / "nowhere"))],
                        [Attempt(1, 1000.0)], phase=Phase.FINISHED))
    data = {"cluster": {"tasks": [LOCAL]}, "job": {"kind": "command", "command": ["true", "{x}"]},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
            "budget": {"trials": 4}, "sampler": "random", "seed": 7}
    here = control.folder(root, SWEEP)
    here.mkdir(parents=True)
    spec = sweep_from_dict(data)
    found = study.open_study(spec, here, SWEEP)
    for i in range(4):
        trial = found.ask(study.distributions(spec.space))
        trial.report(1.0 / (i + 1), step=1)
        study.tell(found, trial, 0.1 * i)
    write_yaml(data, here / control.SPEC, private=True)
    (here / control.STATE).write_text(json.dumps({"phase": "finished", "created": time.time()}))


def timed(tree: Path, root: Path, argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one whole `python -m backend` process in ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "backend", "--runs", str(root), *argv], cwd=tree,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, help="the other checkout (before); none: this tree alone")
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    trees = {**({"before": a.tree.resolve()} if a.tree else {}), "after": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        make_runs(root)
        for tree in trees.values():   # a warm-up each: bytecode caches and the page cache filled
            for argv in COMMANDS:
                timed(tree, root, argv)
        got = {(name, i): [] for name in trees for i in range(len(COMMANDS))}
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for i, argv in enumerate(COMMANDS):
                for name in order:
                    got[(name, i)].append(timed(trees[name], root, argv))
    print(f"{a.rounds} rounds, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'command':<28} {'tree':<7} {'wall min':>8} {'median':>7} {'max':>6} {'CPU median':>10}")
    for i, argv in enumerate(COMMANDS):
        for name in trees:
            walls, cpus = zip(*got[(name, i)])
            print(f"{' '.join(argv):<28} {name:<7} {min(walls):8.2f} {statistics.median(walls):7.2f} "
                  f"{max(walls):6.2f} {statistics.median(cpus):10.2f}")


if __name__ == "__main__":
    main()
