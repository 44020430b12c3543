"""``tfconsole sweep start|status|stop [--json]``: hyperparameter sweeps (backend/sweeps)."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from backend.cli.checkpoints import _options, _store, print_json, print_table

# The sweeps package (Optuna: 0.9 s with its alembic), the runs store and SSH are imported inside
# each command: the parser of every command imports this module.


def cmd_start(a) -> int:
    from backend.config.yaml_files import read_yaml
    from backend.sweeps import control
    from backend.sweeps.spec import load_sweep
    spec = load_sweep(a.file)
    data = read_yaml(a.file)
    sweep_id = control.start(spec, data, _store(a).root, _options(a), sweep_id=a.id)
    print_json({"sweep": sweep_id}) if a.json else print(sweep_id)
    return 0


def cmd_status(a) -> int:
    from backend.sweeps import control
    root = _store(a).root
    if not a.sweep:
        found = [control.status(root, s) for s in control.list_sweeps(root)]
        if a.json:
            print_json([{k: v for k, v in f.items() if k != "trials"} for f in found])
        elif not found:
            print(f"no sweeps under {root}: start one with `tfconsole sweep start SWEEP.yaml`")
        else:
            print_table([{"sweep": f["sweep"], "phase": f.get("phase", ""), "trials": len(f["trials"]),
                          "best": "" if not f["best"] else f"{f['best']['value']:.6g}"} for f in found],
                        ["sweep", "phase", "trials", "best"])
        return 0
    return _show(control.status(root, a.sweep), a.json)


def cmd_stop(a) -> int:
    from backend.sweeps import keeper
    return _show(keeper.stop(_store(a).root, a.sweep), a.json)


def cmd_resume(a) -> int:
    from backend.sweeps import control
    return _show(control.resume(_store(a).root, a.sweep), a.json)


def _show(found: dict, as_json: bool) -> int:
    if as_json:
        print_json(found)
        return 0
    best = found["best"]
    print(f"sweep {found['sweep']}: {found.get('phase')}" + (f" ({found['reason']})" if found.get("reason") else ""))
    print(f"objective: {found['direction']} {found['metric']}, each trial's {found['of']} value; best: "
          + (f"trial {best['trial']} = {best['value']:.6g} (run {best['run_id']})" if best else "none yet"))
    rows = [{"trial": t["trial"], "state": t["state"], "value": "" if t["value"] is None else f"{t['value']:.6g}",
             "pruned at": "" if t["pruned_step"] is None else t["pruned_step"], "run": t["run_id"] or "",
             "params": json.dumps(t["params"])} for t in found["trials"]]
    if rows:
        print_table(rows, ["trial", "state", "value", "pruned at", "run", "params"])
    return 0


def cmd_export(a) -> int:
    from backend.sweeps import best
    result = best.export_best(_store(a).root, a.sweep, _options(a), name=a.name)
    if a.json:
        print_json(result)
    else:
        print(f"sweep {a.sweep}: trial {result['trial']}'s step {result['chosen_step']} (run {result['run_id']}) "
              f"exported and verified: {', '.join(f'{k} {v}' for k, v in result['paths'].items())}")
    return 0


def cmd_keep(a) -> int:
    from backend.hosts.ssh import SSHOptions
    from backend.sweeps import keeper
    options = SSHOptions(**{**asdict(_options(a)), **json.loads(a.ssh_options or "{}")})
    print(f"sweep {a.sweep}: {keeper.main(a.sweep, Path(_store(a).root), options, a.poll)}", flush=True)
    return 0


def add_command(add) -> None:
    s = add("sweep", lambda a: a.sweep_fn(a), "hyperparameter sweeps: start, status, stop, resume, export (Optuna)")
    sub = s.add_subparsers(dest="sweep_command", required=True, metavar="start|status|stop|resume|export")
    for name, fn, help in (("start", cmd_start, "start a sweep from its YAML file; prints its id"),
                           ("status", cmd_status, "every sweep, or one sweep's trials and best trial"),
                           ("stop", cmd_stop, "stop a sweep's running trials and its keeper"),
                           ("resume", cmd_resume, "start a keeper again for a sweep whose keeper is gone"),
                           ("export", cmd_export, "export the best trial's best checkpoint, verified as Export does"),
                           ("keep", cmd_keep, "keep a sweep (start runs this detached)")):
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(sweep_fn=fn)
        if name == "start":
            p.add_argument("file", help="the sweep's YAML file: job, cluster, space, objective, budget (docs/sweeps.md)")
            p.add_argument("--id", default=None, help="the sweep's id (default: sweep-<time>-<random>)")
        else:
            p.add_argument("sweep", nargs="?" if name == "status" else None,
                           help="the sweep's id, as start printed it" + (" (none: every sweep)" if name == "status" else ""))
        if name == "export":
            p.add_argument("--name", default=None, help="the export's folder name (default: SWEEP-best)")
        if name == "keep":
            p.add_argument("--ssh-options", default=None)
            p.add_argument("--poll", type=float, default=1.0)
        else:
            p.add_argument("--json", action="store_true", help="print JSON for scripts")
