"""A sweep's overhead per trial against launching the same trials by hand, and what pruning saves.

Two loopback sshd hosts (127.0.0.2, 127.0.0.3), one trial at a time on both (``at_once: 1``).
The job is a small reporting script, no TensorFlow: it reports ``val_loss`` at each of
``--steps`` steps, ``--pace`` seconds apart, so the figures are the console's and Optuna's, not
training's. Side by side in one run:

- **by hand**: ``--trials`` runs launched one after another through the Python API, each
  launched as soon as the previous one finished (what a script that waits would do);
- **sweep**: the same number of trials from one sweep (random sampler, no pruner);
- **sweep + median pruner**: the same, with Optuna's median pruner (its first 2 trials are
  never pruned: ``n_startup_trials``).

The overhead per trial is the time from one trial's last metric line to the next trial's first
(the ``time`` fields of the chiefs' own ``metrics.jsonl``); the steps trained are counted from
the same files. For each pruned trial: how fast it stopped (the chief's line at the pruned step
-> the run's end in its record) and how many steps it reported after that line.

    .venv/bin/python bench/sweep_overhead.py [--trials 6] [--steps 20] [--pace 0.2]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.config.spec import cluster_from_dict, job_from_dict  # noqa: E402
from backend.runs import launcher  # noqa: E402
from backend.runs.store import RunStore  # noqa: E402
from backend.sweeps import control  # noqa: E402
from backend.sweeps.spec import sweep_from_dict  # noqa: E402
from rig import sshd  # noqa: E402
from rig.hosts import start_hosts  # noqa: E402

REPORT = ("import sys, time, tfconsole\nx, steps, pace = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])\n"
          "for s in range(1, steps + 1):\n    time.sleep(pace)\n"
          "    tfconsole.report(s, loss=1.0 / s, metrics={'val_loss': (x - 0.3) ** 2 + 1.0 / s})\n")


def tasks(hosts, key: Path, root: Path) -> list[dict]:
    return [{"role": "chief" if n == 0 else "worker", "host": h.address, "ssh_port": h.port,
             "tf_port": sshd.free_port(), "identity_file": str(key), "python": sys.executable,
             "workdir": str(root / f"work-{h.address}")} for n, h in enumerate(hosts)]


def lines(root: Path, run_id: str) -> list[dict]:
    path = next(root.glob(f"work-*/runs/{run_id}.*/metrics.jsonl"))
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def gaps_and_steps(root: Path, run_ids: list[str]) -> tuple[list[float], int]:
    """Seconds from each trial's last line to the next one's first; steps trained by the chiefs."""
    found = [[m for m in lines(root, r) if m["task"] == "chief-0"] for r in run_ids]
    found = sorted(found, key=lambda ls: ls[0]["time"])
    gaps = [b[0]["time"] - a[-1]["time"] for a, b in zip(found, found[1:])]
    return gaps, sum(max(m["step"] for m in ls) for ls in found)


def prune_reaction(root: Path, runs: Path, found: dict) -> list[tuple[int, float, int]]:
    """Per pruned trial: its pruned step, seconds from the chief's line at that step to the run's
    end as its record says (the keeper's read, Optuna's decision, the save and the stop), and the
    steps the chief reported after that line."""
    out = []
    for t in found["trials"]:
        if t["state"] != "pruned" or not t["run_id"]:
            continue
        chief = [m for m in lines(root, t["run_id"]) if m["task"] == "chief-0"]
        at = next(m for m in chief if m["step"] == t["pruned_step"])
        ended = RunStore(runs).load(t["run_id"]).attempts[-1].ended
        out.append((t["pruned_step"], ended - at["time"], max(m["step"] for m in chief) - t["pruned_step"]))
    return out


def by_hand(cluster: dict, root: Path, options, xs: list[float], steps: int, pace: float) -> list[str]:
    store = RunStore(root / "runs-by-hand")
    ids = []
    for x in xs:
        job = job_from_dict({"kind": "command", "command": [sys.executable, "-c", REPORT, str(x), str(steps), str(pace)]})
        run = launcher.launch(cluster_from_dict(cluster), job, store=store, options=options)
        run.wait(timeout=600)
        ids.append(run.run_id)
    return ids


def sweep(cluster: dict, root: Path, options, trials: int, steps: int, pace: float, pruner: str) -> list[str]:
    data = {"cluster": cluster, "job": {"kind": "command",
                                        "command": [sys.executable, "-c", REPORT, "{x}", str(steps), str(pace)]},
            "space": {"x": {"range": [0.0, 1.0]}}, "objective": {"metric": "val_loss", "direction": "min"},
            "budget": {"trials": trials}, "at_once": 1, "sampler": "random", "seed": 5, "pruner": pruner}
    runs = root / f"runs-{pruner}"
    sweep_id = control.start(sweep_from_dict(data), data, RunStore(runs).root, options, poll_s=0.3)
    while control.status(runs, sweep_id)["phase"] not in ("finished", "failed", "stopped"):
        time.sleep(0.5)
    found = control.status(runs, sweep_id)
    if found["phase"] != "finished":
        sys.exit(f"the sweep ended {found['phase']}: {found.get('reason')}")
    return [t["run_id"] for t in found["trials"] if t["run_id"]], found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--steps", type=int, default=20, help="steps each trial reports (default 20)")
    p.add_argument("--pace", type=float, default=0.2, help="seconds between reports (default 0.2)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts, key, options = start_hosts(root, 2)
        cluster = {"tasks": tasks(hosts, key, root)}
        try:
            swept, _ = sweep(cluster, root, options, a.trials, a.steps, a.pace, "none")
            # The same parameters by hand, in the sweep's order: only the driver differs.
            xs = [RunStore(root / "runs-none").load(r).sweep["params"]["x"] for r in swept]
            hand = by_hand(cluster, root, options, xs, a.steps, a.pace)
            pruned, found = sweep(cluster, root, options, a.trials, a.steps, a.pace, "median")
            rows = {"by hand": gaps_and_steps(root, hand), "sweep": gaps_and_steps(root, swept),
                    "sweep + median pruner": gaps_and_steps(root, pruned)}
            reaction = prune_reaction(root, root / "runs-median", found)
        finally:
            for h in hosts:
                h.stop()
    print(f"{a.trials} trials of {a.steps} steps ({a.pace} s apart), one at a time on 2 loopback SSH hosts")
    for name, (gaps, steps) in rows.items():
        print(f"{name:>22}: trial end -> next trial's first step median {statistics.median(gaps):.2f} s "
              f"(each: {' '.join(f'{g:.2f}' for g in gaps)}); steps trained {steps}")
    print("pruned:", [(t["trial"], t["pruned_step"]) for t in found["trials"] if t["state"] == "pruned"])
    for step, seconds, after in reaction:
        print(f"  pruned at step {step}: its line -> the run ended {seconds:.2f} s; "
              f"{after} step(s) reported after it")


if __name__ == "__main__":
    main()
