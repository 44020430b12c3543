"""Helpers for the failure-injection suite: real clusters, real kills, and the checks that every
scenario ends with: no process of the run on any host, and every TF port free to bind again."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from backend.runs import detached
from backend.runs.store import RunStore
from backend.config.spec import job_from_dict
from tests.conftest import FAULT_RESULTS, chief_metrics as metrics, processes_of, require, wait_for  # noqa: F401 - metrics: the scenarios import it from here
from rig.sshd import port_free

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = str(ROOT / "examples" / "synthetic.py")
# Small enough for 2 cores: 300 steps of a 16-32-32-1 MLP, a checkpoint every 40 steps.
# pace_s: at least 9 s a run, so a kill "past the first checkpoint" lands mid-run; unpaced, a
# quiet machine ran all 300 steps before the kill and the scenario tested nothing.
PARAMS = {"epochs": 1, "steps_per_epoch": 300, "checkpoint_every": 40, "log_every": 5,
          "global_batch_size": 32, "collective_timeout_s": 30, "pace_s": 0.03}
# Keeps TensorFlow to one thread per op on this 2-core machine; quiets its C++ noise.
TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
_RESULTS: dict[str, dict] = {}


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "4m"):
    """A real tmpfs of ``size`` mounted on a new ``folder`` (root only), unmounted at the end: a
    disk that fills for real."""
    require("root, to mount a tmpfs", os.geteuid() == 0)
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(folder)], check=True)   # a process still holds a file


def harness_job(module: str = SYNTHETIC, *, max_restarts: int = 3, backoff_s: float = 1.0,
                stall_timeout_s: float = 120.0, alerts: dict | None = None, **params):
    return job_from_dict({"kind": "harness", "module": module, "params": {**PARAMS, **params},
                          "env": TF_ENV, "restart": {"mode": "on_failure", "max_restarts": max_restarts,
                                                     "backoff_s": backoff_s, "stall_timeout_s": stall_timeout_s},
                          **({"alerts": alerts} if alerts else {})})


def command_job(code: str, python: str, **restart):
    return job_from_dict({"kind": "command", "command": [python, "-c", code],
                          "restart": {"mode": "on_failure", **restart}})


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path / "runs")


def record(name: str, **figures) -> None:
    """Keep a scenario's measured figures for the JSON file and the summary printed at the end."""
    _RESULTS[name] = {k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}
    print(f"FAULT {name}: {json.dumps(_RESULTS[name])}")
    if _RESULTS_FILE:   # written at once: an interrupted suite still leaves what it measured
        _RESULTS_FILE[0].write_text(json.dumps(_RESULTS, indent=1))


_RESULTS_FILE: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def results_file(tmp_path_factory):
    _RESULTS_FILE[:] = [tmp_path_factory.getbasetemp() / FAULT_RESULTS]
    return _RESULTS_FILE[0]


def wait_phase(store, run_id: str, phases: tuple[str, ...], timeout: float):
    return wait_for(lambda: (s := store.load(run_id)).phase in phases and s, timeout,
                    f"run {run_id} to become {'/'.join(phases)}", poll=0.5)


def kill_task(run, name: str) -> float:
    """kill -9 the task's training process (not its supervisor, which records the exit code)."""
    info = json.loads(Path(_local(run.task(name).remote_run_dir), "tasks", f"{name}.json").read_text())
    os.kill(info["pid"], signal.SIGKILL)
    return time.time()


def freeze_task(run, name: str) -> tuple[int, float]:
    """SIGSTOP the task's whole process group (its supervisor too), as a frozen host would be:
    its processes and sockets stay, nothing answers. (the group, when)"""
    info = json.loads(Path(_local(run.task(name).remote_run_dir), "tasks", f"{name}.json").read_text())
    pgid = os.getpgid(info["pid"])
    os.killpg(pgid, signal.SIGSTOP)
    return pgid, time.time()


def _local(path: str) -> str:
    return path if os.path.isabs(path) else os.path.expanduser(f"~/{path}")


def assert_nothing_left(run, store) -> None:
    """No keeper, no task process of the run anywhere, every TF port bindable."""
    wait_for(lambda: detached.keeper_pid(store.path(run.run_id)) is None, 30, "the keeper to exit")
    wait_for(lambda: processes_of(run) == [], 30, f"no process of the run: {processes_of(run)}")
    for spec in run.cluster.tasks:
        wait_for(lambda: port_free(spec.tf_port), 30, f"TF port {spec.tf_port} to bind")


def expected_steps(resume_steps: list[int]) -> list[int]:
    """The steps with a metrics row (job contract): every ``log_every`` steps, and the first step
    of each attempt, which resumed after ``resume_steps[i]`` (0 for a fresh start)."""
    total = PARAMS["epochs"] * PARAMS["steps_per_epoch"]
    scheduled = range(PARAMS["log_every"], total + 1, PARAMS["log_every"])
    return sorted(set(scheduled) | {start + 1 for start in resume_steps})


def steps_seen(rows: list[dict], task: str) -> list[int]:
    """Steps of ``task`` as a reader that honours attempts sees them: a new attempt's rows
    replace the old attempt's rows from its first step on."""
    kept: dict[int, int] = {}
    for r in rows:
        if r["task"] != task:
            continue
        for step in [s for s, a in kept.items() if a < r["attempt"] and s >= r["step"]]:
            del kept[step]
        kept[r["step"]] = r["attempt"]
    return sorted(kept)
