"""Start, read and stop sweeps: each in ``RUNS/.sweeps/<id>/`` (a dot: never taken for a run)
with its spec as launched (``sweep.yaml``, job and cluster inline), its phase (``state.json``),
Optuna's SQLite file, and its keeper's pid and log. The keeper is a detached process, started
and found as a run's keeper is (backend/runs/detached.py)."""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from backend.config.yaml_files import write_yaml, read_yaml
from backend.config.kinds import any_cluster_to_dict
from backend.config.spec import job_to_dict
from backend.errors import ConsoleError, SweepError
from backend.files import read_dict, write_private
from backend.records.state import check_run_id, new_run_id
from backend.runs import detached
from backend.access import viewing
from backend.runs.store import RunStore
from backend.sweeps import trials
from backend.sweeps.spec import SweepSpec, sweep_from_dict

# The Optuna glue (backend/sweeps/study.py) is imported by the functions that open a study: Optuna
# and SQLAlchemy cost 1.2 s at start, and listing sweeps needs neither.
if TYPE_CHECKING:
    from backend.hosts.ssh import SSHOptions

FOLDER = ".sweeps"
SPEC, STATE, STOP = "sweep.yaml", "state.json", "stop-requested"
LIVE = ("starting", "running", "stopping")


def folder(runs_root: Path, sweep_id: str) -> Path:
    return Path(runs_root) / FOLDER / check_run_id(sweep_id)


def start(spec: SweepSpec, data: dict, runs_root: Path, options: SSHOptions, *,
          sweep_id: str | None = None, poll_s: float = 1.0) -> str:
    """Record the sweep and start its keeper; its id. ``data``: the spec as the user wrote it
    (kept with the job and cluster inline, so the sweep no longer needs the user's files)."""
    from backend.sweeps import study as studies
    sweep_id = sweep_id or f"sweep-{new_run_id()}"
    here = folder(runs_root, sweep_id)
    RunStore(runs_root).require_writable()
    try:
        here.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        raise ConsoleError(f"sweep {sweep_id} already exists", "Choose another sweep id.") from None
    try:   # a storage that does not answer, or a damaged file: said now, not by a keeper gone
        studies.open_study(spec, here, sweep_id)
    except studies.SweepError:
        shutil.rmtree(here, ignore_errors=True)
        raise
    kept = {**data, "cluster": any_cluster_to_dict(spec.cluster), "job": job_to_dict(spec.job)}
    write_yaml(kept, here / SPEC, private=True)   # its env may hold an API key
    set_state(here, phase="starting", created=time.time(), ssh_options=asdict(options), poll_s=poll_s)
    _spawn_keeper(runs_root, sweep_id)
    return sweep_id


def _spawn_keeper(runs_root: Path, sweep_id: str) -> int:
    here, state = folder(runs_root, sweep_id), read_dict(folder(runs_root, sweep_id) / STATE)
    argv = [sys.executable, "-m", "backend", "--runs", str(Path(runs_root).resolve()), "sweep", "keep",
            sweep_id, "--ssh-options", json.dumps(state.get("ssh_options", {})),
            "--poll", str(state.get("poll_s", 1.0))]
    pid = detached.spawn(argv, here / detached.KEEPER_LOG).pid
    detached.write_pid(here, pid)
    return pid


def resume(runs_root: Path, sweep_id: str) -> dict:
    """Start a keeper again for a sweep whose keeper is gone (a console or machine restart): it
    keeps the trials still running and finishes the budget. Nothing when one is alive."""
    here = folder(runs_root, sweep_id)
    found = status(runs_root, sweep_id)   # refuses an unknown sweep by name
    if found.get("phase") == "interrupted":
        (here / STOP).unlink(missing_ok=True)
        _spawn_keeper(runs_root, sweep_id)
    return status(runs_root, sweep_id)


def load_spec(here: Path) -> SweepSpec:
    return sweep_from_dict(read_yaml(here / SPEC), base_dir=here)


def set_state(here: Path, **change) -> dict:
    state = {**read_dict(here / STATE), **change}
    write_private(here / STATE, json.dumps(state, indent=1))
    return state


def status(runs_root: Path, sweep_id: str) -> dict:
    """What ``sweep status --json`` prints: phase, objective, budget, best trial, every trial."""
    viewing.require(runs_root)
    here = folder(runs_root, sweep_id)
    if not (here / SPEC).exists():
        raise ConsoleError(f"no sweep {sweep_id!r} under {runs_root}", "List sweeps with `tfconsole sweep status`.")
    spec, state = load_spec(here), read_dict(here / STATE)
    if state.get("phase") in LIVE and detached.keeper_pid(here) is None:
        state["phase"], state["reason"] = "interrupted", "its keeper is gone: `tfconsole sweep resume` goes on"
    out = {"sweep": sweep_id, **state, "metric": spec.metric, "direction": spec.direction, "of": spec.of,
           "budget": {"trials": spec.trials, "wall_s": spec.wall_s}, "at_once": spec.at_once,
           "sampler": spec.sampler, "pruner": spec.pruner, "pruner_options": dict(spec.pruner_options),
           "best": None, "trials": []}
    if (here / trials.DB).exists() or spec.storage:
        read = _read_trials(here, sweep_id, spec, state)
        if read is not None:
            out.update(best=read[0], trials=read[1])
    return out


def _read_trials(here: Path, sweep_id: str, spec: SweepSpec, state: dict) -> tuple[dict | None, list] | None:
    """(best, trials) of the sweep's study, or None before it has one. Its own SQLite file is
    read directly (backend/sweeps/trials.py: no Optuna, 1.7 s less); another storage, or a file
    that reader does not know, through Optuna."""
    if not spec.storage:
        with contextlib.suppress(trials.Unknown):
            return trials.read(here / trials.DB, sweep_id)
    from backend.sweeps import study as studies
    try:
        found = studies.read_study(here, sweep_id, spec.storage) if _has_study(here, sweep_id, spec) else None
    except SweepError:
        if state.get("phase") != "starting":   # its keeper may be making the tables: not yet
            raise
        return None
    return None if found is None else (studies.best(found), studies.rows(found))


def _has_study(here: Path, sweep_id: str, spec: SweepSpec) -> bool:
    import optuna
    from backend.sweeps import study as studies
    try:
        names = optuna.get_all_study_names(studies.storage_url(spec, here))
    except Exception:  # noqa: BLE001 - not created yet, or damaged: read_study says which
        return True
    return sweep_id in names


def study_of(runs_root: Path, sweep_id: str):
    """The sweep's Optuna study (for Optuna's own figures), or None before its first trial."""
    from backend.sweeps import study as studies
    viewing.require(runs_root)
    here = folder(runs_root, sweep_id)
    spec = load_spec(here)
    if not ((here / trials.DB).exists() or spec.storage) or not _has_study(here, sweep_id, spec):
        return None
    return studies.read_study(here, sweep_id, spec.storage)


def list_sweeps(runs_root: Path) -> list[str]:
    viewing.require(runs_root)
    base = Path(runs_root) / FOLDER
    return sorted((p.name for p in base.iterdir() if (p / SPEC).exists()), reverse=True) if base.is_dir() else []
