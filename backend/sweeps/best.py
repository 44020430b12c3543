"""Export the best trial's best checkpoint in one action: the sweep's best
trial by its objective, then, among the checkpoints that trial's run kept, the one whose saved
objective value is best (the newest where none carries it, or with ``objective.of: last``),
exported and verified on the chief as Export does for any run (backend/checkpoints.py: held,
rebuilt, compared in a fresh process)."""
from __future__ import annotations

import math
from pathlib import Path

from backend import checkpoints
from backend.errors import ConsoleError
from backend.hosts.ssh import SSHOptions
from backend.runs import launcher
from backend.runs.store import RunStore
from backend.sweeps import control


def best_step(listed: list[dict], metric: str, direction: str, of: str = "best") -> int:
    """The step of the checkpoint with the best saved ``metric`` (min or max); the newest when
    no checkpoint carries a finite value of it (a fit script's epoch-end saves carry val_*).
    ``of: last`` (the sweep judged each trial by its last value): the newest, the checkpoint
    nearest the value the trial was judged by, as the best one is under ``of: best``."""
    if of == "last":
        return max(c["step"] for c in listed)
    scored = [(c["metrics"][metric], c["step"]) for c in listed
              if isinstance((c.get("metrics") or {}).get(metric), (int, float))
              and math.isfinite(c["metrics"][metric])]
    if not scored:
        return max(c["step"] for c in listed)
    pick = min if direction == "min" else max
    return pick(scored)[1]


def export_best(runs_root: Path, sweep_id: str, options: SSHOptions, *, name: str | None = None) -> dict:
    """What Export returns, with the sweep, trial, run and the step chosen."""
    found = control.status(runs_root, sweep_id)
    best = found["best"]
    if not best or not best.get("run_id"):
        raise ConsoleError(f"sweep {sweep_id} has no finished trial yet",
                           "Export once a trial has finished (`tfconsole sweep status` shows the best).")
    run = launcher.attach(best["run_id"], store=RunStore(runs_root), options=options)
    listed = checkpoints.list_checkpoints(run)
    if not listed:
        raise ConsoleError(f"the best trial's run {run.run_id} kept no checkpoint",
                           "Make the job save checkpoints (KerasCallback, tfconsole.Loop or the harness).")
    step = best_step(listed, found["metric"], found["direction"], found["of"])
    result = checkpoints.export(run, step=step, name=name or f"{sweep_id}-best")
    return {"sweep": sweep_id, "trial": best["trial"], "run_id": run.run_id, "chosen_step": step, **result}
