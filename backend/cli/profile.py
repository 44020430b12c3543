"""``tfconsole profile RUN [--steps N]``: every worker of a live run profiled for N steps from its
next sync point (backend/profiles.py); prints each worker's op time split into compute,
collective communication and input, and its top ops; the traces land in ``runs/<id>/profile/``
for ``tfconsole tensorboard RUN``. ``--json`` for scripts."""
from __future__ import annotations

from backend.cli.checkpoints import _attach, print_json


def cmd_profile(a) -> int:
    from backend import profiles   # imported here: this command only
    run = _attach(a)
    found = profiles.profile(run, a.steps, wait_s=a.wait, say=lambda s: None if a.json else print(s))
    if a.json:
        print_json({"run_id": run.run_id, "step": found.step, "steps": found.steps,
                    "folder": str(found.folder), "tasks": found.tasks})
        return 0
    print("\n".join(found.lines()))
    return 0


def add_command(add) -> None:
    from backend.client.harness.contract import profiling
    DEFAULT_STEPS, MAX_STEPS = profiling.DEFAULT_STEPS, profiling.MAX_STEPS
    s = add("profile", cmd_profile, "profile every worker of a live run for N steps (TensorFlow's profiler)")
    s.add_argument("run")
    s.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"steps to profile from the next sync point (1-{MAX_STEPS}, default {DEFAULT_STEPS})")
    s.add_argument("--wait", type=float, default=180.0, help="seconds to wait for every worker's profile")
    s.add_argument("--json", action="store_true", help="print JSON for scripts")
